"""The `keywords` job: caption files in, one JSONL line per sample out, resumable (docs/method.md §1).

It loads the spaCy pipeline, filters captions it cannot use (logged with the reason), finds every caption's rated
candidates (`keywords.extract_candidates`, in worker processes or an engine's actors) and samples one keyword per
sample with `keywords.KeywordSampler`, in input order.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..sources import anchor_caption
from .concreteness import Ratings
from .keywords import CATEGORIES, Candidate, KeywordSampler, SamplerConfig, extract_candidates
from .streams import SampleSpool, ValueTally, read_records, repair_tail


class KeywordJobError(ValueError):
    """A keyword job that cannot start; the message names the input and the fix."""


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


class KeywordTally:
    """The keyword summary's counters, added to a record at a time (the job holds these, not its records)."""

    def __init__(self):
        self.ok, self.skipped = 0, 0
        self.concreteness = ValueTally()
        self.categories: Counter = Counter()
        self.keywords: set[str] = set()  # distinct keywords: bounded by the ratings table, not by the input
        self.reasons: Counter = Counter()

    def add(self, record: dict) -> None:
        if record["status"] == "ok":
            self.ok += 1
            self.concreteness.add(record["concreteness"])
            self.categories[record["category"]] += 1
            self.keywords.add(record["keyword"].lower())
        else:
            self.skipped += 1
            self.reasons[record["reason"].split(" (")[0]] += 1

    def summary(self) -> dict:
        n = self.ok
        mean, median = self.concreteness.mean_median()
        return {
            "count": n,
            "skipped": self.skipped,
            "mean_concreteness": mean,
            "median_concreteness": median,
            "category_shares": {c: self.categories[c] / n if n else 0.0 for c in CATEGORIES},
            "unique_keywords": len(self.keywords),
            "skipped_by_reason": dict(self.reasons),
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
    # the strings and lexemes spaCy adds for a batch's new words (a number, a name) are freed after it: its
    # vocabulary would grow with the input (~250 B a caption that brings a new word); the candidates are plain
    # Python objects and outlive the zone
    with nlp.memory_zone():
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

    def map(self, batches):
        """The candidates of each batch of texts in ``batches`` (any iterable), in order. The workers are given at
        most two batches each ahead of the results taken: `Pool.imap` would read the whole iterable at once."""
        if self.pool is None:
            yield from (candidates_of(texts, self.nlp, self.ratings) for texts in batches)
            return
        ahead = deque()
        for texts in batches:
            ahead.append(self.pool.apply_async(candidates_of, (texts,)))
            if len(ahead) > 2 * self.workers:
                yield ahead.popleft().get()
        while ahead:
            yield ahead.popleft().get()

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
    columns: dict[str, str] | None = None,
    limits: FilterConfig = FilterConfig(),
    batch_size: int = 256,
    workers: int = 1,
    progress: bool = True,
    keep: Callable[[str], bool] | None = None,
    extractor=None,
    limit: int | None = None,
) -> tuple[dict, KeywordRecords]:
    """Sample one keyword per caption sample into ``out`` (JSONL), resuming whatever ``out`` already holds.

    Every input sample gets exactly one line, ``status`` ``ok`` or ``skipped`` with a ``reason``. Lines are
    written in input order, so the quota counts rebuilt from the ok lines on restart equal those of an
    uninterrupted run. ``keep`` selects samples by id (a part of a sharded run); the others are not written.
    Returns the summary (also written to ``<out stem>.summary.json``) and the records, as in ``out`` (read from it
    when iterated: the job holds a batch and the summary's counters, never the records).
    ``extractor`` finds the candidates of batches instead of `CandidateWorkers` (e.g. on Ray), in order; one with a
    ``read_files`` method reads the input's store files too (`sources.read_samples`'s ``map_files``).
    ``limit``: only the first ``limit`` samples of the input (before ``keep``), to try a setting on a few.
    """
    from tqdm import tqdm

    from ..records import JsonlAppender, atomic_write_json, differing
    from ..sources import read_samples

    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # an engine that reads store files in parallel (Ray) has ``read_files``: the same samples, read in its workers
    read = read_samples(captions, fmt=fmt, split=split, columns=columns,
                        map_files=getattr(extractor, "read_files", None))
    with SampleSpool(out_path.parent) as spool:
        # every input file is read (and a malformed one reported) before anything is written
        spool.fill((s for s in itertools.islice(read, limit) if keep is None or keep(s.id)), anchor_caption)
        settings = {
            "sampler": asdict(sampler_config), "filter": asdict(limits), "scale": ratings.name,
            "spacy_model": f"{nlp.meta['lang']}_{nlp.meta['name']}-{nlp.meta['version']}", "limit": limit,
            **({"columns": columns} if columns else {}),
        }
        config_path = out_path.with_name(out_path.stem + ".config.json")
        if config_path.exists() and out_path.exists():
            previous = json.loads(config_path.read_text())
            changed = sorted(k for k in settings if previous.get(k) != settings[k])
            if changed:
                raise KeywordJobError(
                    f"{out_path} was started with other settings ({differing(changed)}, see {config_path}); "
                    "pass another --out, or delete it to start over"
                )
        atomic_write_json(config_path, settings)

        sampler, tally = KeywordSampler(sampler_config), KeywordTally()
        samples = iter(spool)
        repair_tail(out_path)
        done = 0
        # one line per input sample, in input order: the lines written are the first samples, by position (an id
        # may come twice: its second sample is a "duplicate id" line of its own)
        for record in read_records(out_path):
            sample = next(samples, None)
            if sample is None or sample.id != record["id"]:
                raise KeywordJobError(f"{out_path} does not start with the samples of these caption files in their "
                                      "order; the input changed since the run started: pass another --out, or "
                                      "delete it")
            if record["status"] == "ok":
                sampler.record(record["category"])
            tally.add(record)
            done += 1

        stop_words = nlp.Defaults.stop_words
        todo = ((sample, sample.error or ("duplicate id" if sample.repeated else
                                          precheck(sample.caption, ratings, stop_words, limits)))
                for sample in samples)
        chunks = iter(lambda: list(itertools.islice(todo, batch_size)), [])
        in_flight = deque()  # the chunks whose texts the extractor has taken, in order

        def texts():
            for chunk in chunks:
                in_flight.append(chunk)
                yield [sample.caption for sample, reason in chunk if reason is None]

        bar = tqdm(total=spool.count, initial=done, desc=f"keywords {sampler_config.mode}", unit="caption",
                   disable=not progress, dynamic_ncols=True)
        with JsonlAppender(out_path) as writer, extractor or CandidateWorkers(nlp, ratings, workers) as pool:
            # the workers parse and extract in parallel; sampling stays here, in input order, because the quota
            # counts depend on the order (so the output is byte-identical whatever the number of workers)
            for found in (pool.map(texts()) if done < spool.count else ()):
                found = iter(found)
                chunk = in_flight.popleft()
                for sample, reason in chunk:
                    record = {"id": sample.id, "image": sample.image, "caption": sample.caption}
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
                    tally.add(record)
                bar.update(len(chunk))
                writer.flush()
        bar.close()
    summary = tally.summary()
    summary["settings"] = settings
    atomic_write_json(out_path.with_name(out_path.stem + ".summary.json"), summary)
    return summary, KeywordRecords(out_path)


class KeywordRecords:
    """The records of a keyword file, read from it each time they are iterated (one at a time)."""

    def __init__(self, path: Path):
        self.path = path

    def __iter__(self):
        return read_records(self.path)
