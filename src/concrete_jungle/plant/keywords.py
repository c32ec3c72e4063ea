"""Keyword candidates and concreteness-aware sampling (docs/method.md §1, paper §2.2 and App. A.1).

A caption is parsed once with spaCy; `extract_candidates` lists every replaceable keyword with its
ARO category (attribute / relation / object), its character span and its concreteness rating;
`KeywordSampler` picks one: top-k by concreteness, a category step (relation-first, deficit quota, or
none), then softmax sampling within the chosen category.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from dataclasses import dataclass, field

from .concreteness import Ratings

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


# nouns of time: a preposition before them places nothing in the picture (`on a sunny day`, `at night`)
TIME_NOUNS = frozenset(
    "day night morning evening afternoon noon midnight dawn dusk sunset sunrise weekend week month year time "
    "moment occasion holiday birthday summer winter spring autumn fall season hour minute today tonight".split()
)


def has_agent(verb) -> bool:
    """Whether a verb has someone doing it: a subject, a noun it modifies (`man holding ...`), or those of the verb
    it is coordinated with (`a man sitting ... and watching TV`: `watching` shares `sitting`'s man)."""
    deps = {c.dep_ for c in verb.children}
    if deps & {"nsubj", "nsubjpass"} or (verb.dep_ in ("acl", "relcl") and verb.head.pos_ in _NOMINAL):
        return True
    return verb.dep_ == "conj" and verb.head is not verb and verb.head.pos_ in ("VERB", "AUX") and has_agent(verb.head)


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
            add(i, i + 2, "object", surface, lemma)

    for tok in toks:
        i = tok.i
        if i in used or not tok.is_alpha:
            continue
        pos, dep = tok.pos_, tok.dep_
        # relation (ii): a spatial preposition with a nominal object; a time is no place (`on a sunny day`)
        if dep == "prep" and lowers[i] in SPATIAL_PREPOSITIONS:
            if any(c.dep_ == "pobj" and c.pos_ in ("NOUN", "PROPN", "PRON") and c.lemma_.lower() not in TIME_NOUNS
                   for c in tok.children):
                add(i, i + 1, "relation", lowers[i])
            continue
        # Other stop words are no keyword handles: quantifiers (`several`, `other`, `many`) and light verbs
        # (`have`, `take`, `make`) have no visual replacement. Numerals stay: counting is an attribute.
        if tok.is_stop and pos != "NUM":
            continue
        # relation (iii): interaction, a transitive verb with a subject and a direct object
        if pos == "VERB":
            child_deps = {c.dep_ for c in tok.children}
            if "dobj" in child_deps and has_agent(tok):
                add(i, i + 1, "relation", lowers[i], tok.lemma_)
                continue
            # attribute: a state-like participle (`parked car`, `sliced bread`, `a car parked ...`)
            if tok.tag_ == "VBN" and (dep == "amod" or (dep == "acl" and tok.head.pos_ in _NOMINAL)) \
                    and "dobj" not in child_deps:
                add(i, i + 1, "attribute", lowers[i], tok.lemma_)
        # attribute: adjectival and numeric modifiers, and adjectives coordinated with them
        elif (
            (dep in ("amod", "acomp") and pos in ("ADJ", "NUM"))
            or (dep == "nummod" and pos == "NUM")
            or (dep == "conj" and pos == "ADJ" and tok.head.dep_ in ("amod", "acomp"))
            # an adjective the parser attached as a compound (`a checkered green ball`) still describes the noun
            or (dep == "compound" and pos == "ADJ" and tok.head.pos_ in _NOMINAL)
        ):
            add(i, i + 1, "attribute", lowers[i], tok.lemma_)
        elif pos in _NOMINAL:
            add(i, i + 1, "object", lowers[i], tok.lemma_)
    return sorted(out.values(), key=lambda c: c.start)


@dataclass(frozen=True)
class SamplerConfig:
    """How a keyword is picked; defaults measured against the paper's Table 1 (docs/commands/plant.md, "Default sampler
    settings")."""

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
