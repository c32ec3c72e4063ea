"""A peer's training set, read as released (`sources.peers`), written as a finished ConcreteBatch (docs/method.md
§4, "Imported sets"): the same shards, manifests, rejects, summary and config as a planted one, so `train`,
`cache`, `analyze`, `gallery` and `export` take it as they take a planted set.

Records are cut into chunks of ``samples_per_shard`` in input order; chunk j becomes shard j, written to a
temporary name, renamed, then its manifest rows written (`concretebatch.write_shard_manifest`). A record whose
anchor picture cannot be read, or that is left with no usable negative, is a row with its reason; a negative that
cannot be used (its picture unreadable, no rating) is dropped from its record, named with its reason in the
record's json and the row, and counted in the summary. config.yaml is written first and summary.json last: in
between the folder reads as unfinished (`concretebatch.unfinished`), and the same command resumes it, skipping
the shards whose manifests exist (every step is deterministic, so the redone shards are the same bytes). The
import's identity is its settings and the sha256 of every input file, kept in config.yaml: a resume or re-run
with another is refused while the finished shards hold records, so old and new records never mix. An import that
makes no record (no input row, or every one rejected) is an error counting the reasons, and writes no summary.json.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ..concretebatch import (
    ShardWriter,
    encode_jpeg,
    read_shard_manifests,
    sample_key,
    shard_files,
    shard_name,
    shard_problem,
    write_shard_manifest,
)
from ..configs import ConfigError
from ..errors import PlantError
from ..files.locks import locked
from ..records import atomic_write_json, atomic_write_jsonl, atomic_write_text, differing, file_digest
from ..sources.peers import (
    CAPTION_FILES,
    FORMATS,
    NAMES_IMAGE_FILES,
    SLOT_TYPES,
    PeerNegative,
    PeerOptions,
    image_root,
    input_files,
    needs,
    read_records,
)
from .captioners.validation import CLIP_CONTEXT, clip_tokenizer
from .stages import load_image, package_versions, reason_kind, summarize_manifest

ENTRY = re.compile(r"shard-\d{6,}\.tar|manifests|manifest\.jsonl|rejects\.jsonl|summary\.(json|md)|config\.yaml|cache")
JPEG = b"\xff\xd8\xff"  # a picture in these bytes is stored as it is (others are encoded, as the plant does)
# settings that one format alone reads, with their defaults: given to another format they are an error, not ignored
ONLY_FOR = {"hard_images": (("negclip",), False), "swaps": (("coco-swaps",), 1), "split": (CAPTION_FILES, None),
            "caption_format": (CAPTION_FILES, None), "positives": (CAPTION_FILES, 1)}


@dataclass(frozen=True)
class ImportConfig:
    """What defines an imported dataset. ``images``: the folder the records' image paths are relative to;
    ``hard_images``: NegCLIP's hard-image negatives too; ``swaps``, ``seed``, ``max_attempts``, ``split`` and
    ``caption_format``: how ``coco-swaps`` reads its captions and makes its negatives; ``positives``: how many of a
    picture's captions its record keeps (coco-swaps; 1: each caption a record)."""

    format: str
    inputs: list[str]
    out: str
    images: str | None = None
    samples_per_shard: int = 1000
    scale: str = "brysbaert"
    spacy_model: str | None = None
    limit: int | None = None
    hard_images: bool = False
    swaps: int = 1
    seed: int = 0
    max_attempts: int = 3
    split: str | None = None
    caption_format: str | None = None
    positives: int = 1

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ConfigError(f"format {self.format!r} is not one of {', '.join(FORMATS)}")
        for name in ("samples_per_shard", "swaps", "max_attempts", "positives"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1 (or none: every record), got {self.limit}")
        wrong = [k for k, (formats, default) in ONLY_FOR.items()
                 if self.format not in formats and getattr(self, k) != default]
        if wrong:
            raise ConfigError(f"{', '.join(k.replace('_', '-') for k in wrong)}: only for format "
                              f"{' and '.join(ONLY_FOR[wrong[0]][0])}, not {self.format}")

    def settings(self) -> dict:
        """What defines the dataset: a resume with other settings is refused."""
        d = asdict(self)
        d.pop("out")
        return d

    def check_inputs(self) -> tuple[list[Path], Path]:
        """(the input files, the image root), checked before any file is written or model loaded: the inputs
        exist, the image folder too, the output folder is new, empty or this import's own, and some of the first
        records' images are where their paths say."""
        files = input_files(self.format, self.inputs)
        if needs(self.format).pictures == "inputs" and self.images:
            raise PlantError(f"format {self.format} holds its pictures in its input files: leave out --images")
        root = image_root(self.format, files, self.images)
        if root is None:
            raise PlantError(f"format {self.format} names image files: pass the folder they are relative to with "
                             "--images")
        if not root.is_dir():
            raise PlantError(f"image directory not found: {root}; pass the folder the records' image paths are "
                             "relative to with --images")
        check_import_folder(Path(self.out))
        if self.format in NAMES_IMAGE_FILES or self.format in CAPTION_FILES:
            check_images(self.format, files, root, self.options(), self.limit)
        return files, root

    def options(self) -> PeerOptions:
        return PeerOptions(hard_images=self.hard_images, split=self.split, caption_format=self.caption_format,
                           positives=self.positives, seed=self.seed)


def check_images(fmt: str, files: list[Path], root: Path, options: PeerOptions, limit: int | None,
                 probe: int = 20) -> None:
    """A wrong --images is one error before anything is written, not a run of rejects: some of the first
    ``probe`` images the records name must be there."""
    import itertools

    from ..sources import UnsafePathError, join_under
    from ..sources.stores import SEP

    def exists(name: str) -> bool:
        try:
            return join_under(root, name.partition(SEP)[0]).exists()
        except UnsafePathError:
            return False

    records = itertools.islice(read_records(fmt, files, options), limit)
    named = list(itertools.islice((r.image for r in records if r.error is None and r.image), probe))
    if named and not any(map(exists, named)):
        raise PlantError(f"none of the first {len(named)} images exist under {root} (named by the records, e.g. "
                         f"{root / named[0]}); check --images")


def check_import_folder(out: Path) -> None:
    """``out`` is new, empty or a dataset `import` made (which is resumed); anything else is refused naming a file,
    which is kept."""
    if not out.is_dir():
        return
    if (out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file():
        raise PlantError(f"--out {out} holds a training run (checkpoints/, metrics.jsonl); write the dataset to a "
                         "folder of its own")
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    stray = next((n for n in names if not ENTRY.fullmatch(n)), None)
    if stray is None and names and "import" not in read_config(out):
        stray = names[0]
    if stray is not None:
        raise PlantError(f"--out {out} holds {out / stray}, which is not a file of a dataset `import` made; it is "
                         "kept: write the dataset to a new or empty folder (a folder import made is resumed)")


def read_config(out: Path) -> dict:
    import yaml

    path = out / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (yaml.YAMLError, UnicodeDecodeError):
        data = None
    return data if isinstance(data, dict) else {}


class Importer:
    """Turns the records of one import into shards; one per run (its ratings, parser and captioner loaded once)."""

    def __init__(self, config: ImportConfig, root: Path):
        from .concreteness import load_ratings

        self.config, self.root = config, root
        self.ratings = load_ratings(config.scale)
        self._nlp = None
        self.captioner = None
        if config.format == "coco-swaps":
            from .captioners.rules import RulesCaptioner

            note = RulesCaptioner.check_options()
            if note:
                print(f"import: {note}", file=sys.stderr)
            self.captioner = RulesCaptioner(seed=config.seed)

    @property
    def nlp(self):
        if self._nlp is None:
            from ..nlp import load_spacy

            self._nlp = load_spacy(self.config.spacy_model)
        return self._nlp

    def make_shard(self, out: Path, index: int, chunk: list, seen: dict[str, str]) -> list[dict]:
        """Shard ``index`` of ``chunk``'s records, committed with its manifest rows; returns the rows."""
        docs = self.nlp.pipe([r.caption for r in chunk])
        writer, rows = ShardWriter(out / shard_name(index)), []
        try:
            for record, doc in zip(chunk, docs):
                row, sample = self.build(record, doc, index, seen)
                rows.append(row)
                if sample is not None:
                    writer.write(*sample)
            write_shard_manifest(out, index, rows, writer.commit())
        except BaseException:
            writer.abort()
            raise
        return rows

    def build(self, record, doc, index: int, seen: dict[str, str]) -> tuple[dict, tuple | None]:
        """(manifest row, the arguments of `ShardWriter.write` or None for a reject) of one record."""
        row = {"id": record.id, "shard": shard_name(index), "keyword": None, "category": None, "concreteness": None,
               "negatives": 0, "pictures": 0, "dropped": [], "source": record.source}
        key = sample_key(record.id)
        if key in seen:
            return row | {"status": "rejected", "reason": f"duplicate id: {seen[key]!r} has its key"}, None
        seen[key] = record.id
        image, anchor, reason = load_image(self.root, record.image)
        if reason is None and self.config.format == "clic":
            image, anchor, reason = self.joined_picture(record, image)
        if reason is not None:
            return row | {"status": "rejected", "reason": reason}, None
        negatives, dropped = self.negatives(record, doc)
        row["dropped"] = [d["reason"] for d in dropped]
        if not negatives:
            reasons = row["dropped"] or ["no negative"]
            why = reasons[0] if len(reasons) == 1 else f"no usable negative: {'; '.join(reasons)}"
            return row | {"status": "rejected", "reason": why}, None
        first = negatives[0]
        row |= {"keyword": first["meta"]["keyword"], "category": first["meta"]["category"],
                "concreteness": first["meta"]["concreteness"], "negatives": len(negatives),
                "pictures": sum(n["picture"] is not None for n in negatives), "status": "ok"}
        meta = {"id": record.id, "format": self.config.format, "source": record.source, "image": record.image,
                "fields": record.fields, "keyword": row["keyword"], "category": row["category"],
                "concreteness": row["concreteness"], "scale": self.ratings.name, "neg_image_is_anchor": False,
                "negatives": [n["meta"] for n in negatives]} | ({"dropped_negatives": dropped} if dropped else {})
        anchor_bytes = anchor if anchor[:3] == JPEG else encode_jpeg(image)
        more = [(n["picture"], n["caption"]) for n in negatives[1:]]
        return row, (key, anchor_bytes, record.caption, first["picture"], first["caption"], meta, more,
                     record.positives)

    def joined_picture(self, record, first) -> tuple:
        """A `clic` pair's picture, its two pictures side by side (`sources.peers.clic.join_pictures`)."""
        from ..sources.peers.clic import join_pictures

        second, _, reason = load_image(self.root, record.fields["images"][1])
        if reason is not None:
            return None, None, f"its second picture: {reason}"
        joined = join_pictures(first, second, record.fields["second_first"])
        return joined, encode_jpeg(joined), None

    def negatives(self, record, doc) -> tuple[list[dict], list[dict]]:
        """(usable negatives: caption, picture bytes or None, json entry; dropped ones: caption and reason)."""
        from .keywords import extract_candidates

        if self.config.format == "clic":  # a word swapped between the pair's captions (`clic.swap_negative`)
            import random

            from ..sources.peers.clic import swap_negative

            first, second = self.nlp.pipe(record.fields["captions"])
            record.negatives = [PeerNegative(swap_negative(first, second, random.Random(
                record.fields["negative_seed"])), kind="swap")]

        candidates = extract_candidates(doc, self.ratings)
        if self.captioner is not None:
            from .swaps import make_swaps

            c = self.config
            made, why = make_swaps(record.id, doc, self.ratings, self.captioner, c.swaps, c.max_attempts, c.seed,
                                   candidates)
            kept = [{"caption": m["caption"], "picture": None,
                     "meta": {k: v for k, v in m.items() if k != "caption"} | {"rating_from": "keyword",
                                                                               "image": None}} for m in made]
            return kept, [] if made else [{"caption": None, "reason": why}]
        kept, dropped = [], []
        for position, negative in enumerate(record.negatives):
            entry = {"kind": negative.kind, "image": negative.image, "position": position, "fields": negative.fields}
            if self.config.format in SLOT_TYPES:  # its type's batch slot (`concretebatch.slots_of`)
                entry["slot"] = SLOT_TYPES[self.config.format].index(negative.kind)
            why = negative.error
            picture = None
            if why is None and same_in_clip_context(record.caption, negative.caption):
                why = (f"the negative reads as the caption in CLIP's first {CLIP_CONTEXT} tokens (its change lies past "
                       "them): CLIP cannot tell the two apart")
            if why is None and negative.image:
                image, picture, why = load_image(self.root, negative.image)
                if why is None and picture[:3] != JPEG:
                    picture = encode_jpeg(image)
            if why is None:
                from .changed_words import rate_change

                change = rate_change(doc, negative.caption, self.ratings, self.nlp, candidates)
                why = change.reason
                entry |= change.to_dict() | {"rating_from": "changed words"}
            if why is None:
                kept.append({"caption": negative.caption, "picture": picture, "meta": entry})
            else:
                dropped.append({"caption": negative.caption, "reason": why, "position": position})
        return kept, dropped


UNREADABLE_FIRST = 1000  # an input whose first this many records are all unreadable is not of its format


def same_in_clip_context(caption: str, negative: str) -> bool:
    """Whether CLIP reads ``negative`` as ``caption``: their first `CLIP_CONTEXT` tokens (start and end of text
    included, as open_clip cuts them) are equal while the texts are not. A text of fewer UTF-8 bytes than the
    context has fewer tokens than that (a token is at least one byte), so the tokenizer is loaded only for long
    texts."""
    if caption == negative or max(len(caption.encode("utf-8")), len(negative.encode("utf-8"))) <= CLIP_CONTEXT - 2:
        return False
    tokenizer = clip_tokenizer()

    def context(text: str) -> list[int]:
        tokens = tokenizer.encode(text)[:CLIP_CONTEXT - 2]
        return [tokenizer.sot_token_id, *tokens, tokenizer.eot_token_id]

    return context(caption) == context(negative)


def run_import(config: ImportConfig, progress: bool = True) -> dict:
    """Import (or resume importing) ``config``'s records into ``config.out``; its summary."""
    started = time.perf_counter()
    files, root = config.check_inputs()
    out = Path(config.out)
    with locked(out / ".import.lock", f"--out {out}", "concrete-jungle import"):
        out.mkdir(parents=True, exist_ok=True)
        check_import_folder(out)
        write_config(out, config, input_digests(files))
        for orphan in [*out.glob(".*.tmp"), *out.glob("manifests/.*.tmp")]:
            orphan.unlink(missing_ok=True)  # what a killed run left: a write is a temporary file renamed into place
        return _run(config, files, root, out, started, progress)


def _run(config: ImportConfig, files: list[Path], root: Path, out: Path, started: float, progress: bool) -> dict:
    import itertools

    from tqdm import tqdm

    done = verified_shards(out)
    importer = Importer(config, root)
    seen: dict[str, str] = {}  # key -> the id that holds it, filled in input order: a resume rejects the same ids
    unread, chunk, index, reused = [], [], 0, 0
    bar = tqdm(desc=f"import {config.format}", unit="record", disable=not progress, dynamic_ncols=True)

    def flush():
        nonlocal index, reused
        if index in done:
            if [r["id"] for r in done[index]] != [r.id for r in chunk]:
                raise PlantError(f"{out / shard_name(index)} holds other records than the input gives for it now: "
                                 "the input changed since it was written; import into another --out, or delete "
                                 f"{out} to start over")
            for row in done[index]:
                seen.setdefault(sample_key(row["id"]), row["id"])
            reused += 1
        else:
            (out / "summary.json").unlink(missing_ok=True)  # a shard to make: the folder is unfinished meanwhile
            (out / "summary.md").unlink(missing_ok=True)  # its table, which `concrete-jungle import` writes
            done[index] = importer.make_shard(out, index, chunk, seen)
        bar.set_postfix(rejected=len(unread) + sum(r["status"] != "ok" for rows in done.values() for r in rows))
        index += 1
        chunk.clear()

    try:
        for count, record in enumerate(itertools.islice(read_records(config.format, files, config.options()),
                                                        config.limit), start=1):
            bar.update(1)
            if record.error is not None:
                unread.append({"id": record.id, "shard": None, "keyword": None, "category": None,
                               "concreteness": None, "negatives": 0, "pictures": 0, "dropped": [],
                               "source": record.source, "status": "rejected", "reason": record.error,
                               "stage": "read"})
                if len(unread) == count == UNREADABLE_FIRST:
                    raise PlantError(f"the first {UNREADABLE_FIRST} records of {', '.join(config.inputs)} are all "
                                     f"unreadable ({counted_reasons(unread)}): is it {config.format}'s file "
                                     "(docs/peers.md)? Nothing was imported")
                continue
            chunk.append(record)
            if len(chunk) == config.samples_per_shard:
                flush()
        if chunk:
            flush()
    finally:
        bar.close()
    for stale in sorted(set(done) - set(range(index))):  # shards of an earlier run past this input's end
        remove_shard(out, stale)
        del done[stale]
    return finish(out, config, done, unread, time.perf_counter() - started, reused)


def counted_reasons(rows: list[dict]) -> str:
    """The three most common reasons of rejected rows, counted: ``3 × no caption; 1 × missing image``."""
    reasons = Counter(reason_kind(r["reason"]) for r in rows).most_common()
    return "; ".join(f"{n} × {reason}" for reason, n in reasons[:3]) + ("; ..." if len(reasons) > 3 else "")


def no_record_message(out: Path, config: ImportConfig, rows: list[dict]) -> str:
    """Why an import made no record: every input row rejected (the reasons counted), or no row at all. The folder
    is left without summary.json, so it reads as an unfinished import, never as a dataset."""
    if not rows:
        return (f"the inputs ({', '.join(config.inputs)}) hold no {config.format} record (a header and no rows?): "
                f"nothing was imported; {out} is no dataset")
    return (f"every one of the {len(rows)} records of {', '.join(config.inputs)} was rejected "
            f"({counted_reasons(rows)}; each with "
            f"its reason in {out / 'rejects.jsonl'}); {out} is no dataset: fix the inputs (or --images) and run the "
            "command again")


def verified_shards(out: Path) -> dict[int, list[dict]]:
    """The finished shards' manifest rows; one that is missing or not the bytes written loses its files and is
    made again."""
    done = read_shard_manifests(out)
    for index in sorted(done):
        problem = shard_problem(out, index)
        if problem:
            print(f"import: {problem}; making it again", file=sys.stderr)
            remove_shard(out, index)
            del done[index]
    return done


def remove_shard(out: Path, index: int) -> None:
    """A shard's files, its manifest rows first: without them the shard is not done, whatever else a kill leaves."""
    shard, rows, digest = shard_files(out, index)
    rows.unlink(missing_ok=True)
    digest.unlink(missing_ok=True)
    shard.unlink(missing_ok=True)


def input_digests(files: list[Path]) -> dict[str, str]:
    """The sha256 of every input file, by path: with the settings, what the dataset was made from."""
    return {str(path): file_digest(path) for path in files}


def write_config(out: Path, config: ImportConfig, digests: dict[str, str]) -> None:
    """config.yaml, the import's first file: its settings, its input files' digests and package versions. A
    folder whose finished shards hold records imported with other settings or from other input bytes is refused
    naming them (a resume never mixes old records with new ones); one whose shards hold no record (every row
    rejected) is started again, its old shards removed."""
    import yaml

    previous = read_config(out)
    if previous.get("import") is not None:
        settings = config.settings()
        changed = sorted(k for k in settings if previous["import"].get(k) != settings[k])
        before = previous.get("inputs_sha256", digests)  # a folder imported before digests were kept: unknown
        edited = sorted(path for path in digests if before.get(path) != digests[path])
        if not changed and not edited:
            return
        done = read_shard_manifests(out)
        if changed and any(r["status"] == "ok" for rows in done.values() for r in rows):
            raise PlantError(f"{out} holds a dataset imported with other settings ({differing(changed)}, see "
                             f"{out / 'config.yaml'}); pass another --out, or delete it to start over")
        if edited and any(r["status"] == "ok" for rows in done.values() for r in rows):
            raise PlantError(f"{out} was imported from other bytes of {edited[0]}"
                             f"{f' (and {len(edited) - 1} more input files)' if len(edited) > 1 else ''}: the input "
                             f"changed since (its sha256 differs from the one in {out / 'config.yaml'}), and the "
                             f"finished shards hold the old records; import into another --out, or delete {out} to "
                             "start over")
        for index in done:  # shards of rejects only: made again from the new input
            remove_shard(out, index)
    atomic_write_text(out / "config.yaml", yaml.safe_dump({
        "import": config.settings(), "inputs_sha256": digests, "format_reader": FORMATS[config.format].__name__,
        "versions": package_versions(),
    }, sort_keys=False, allow_unicode=True, width=120))


def finish(out: Path, config: ImportConfig, done: dict[int, list[dict]], unread: list[dict], seconds: float,
           reused: int) -> dict:
    """manifest.jsonl, rejects.jsonl, then summary.json (the mark of a finished dataset); the summary."""
    rows = [row for index in sorted(done) for row in done[index]] + unread
    atomic_write_jsonl(out / "manifest.jsonl", rows)
    atomic_write_jsonl(out / "rejects.jsonl", [r for r in rows if r["status"] != "ok"])
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise PlantError(no_record_message(out, config, rows))
    dropped = Counter(reason_kind(reason) for r in rows for reason in (r["dropped"] if r["status"] == "ok" else []))
    summary = summarize_manifest(rows) | {
        "format": config.format, "negatives": sum(r["negatives"] for r in ok),
        "negatives_per_record": {str(k): v for k, v in sorted(Counter(r["negatives"] for r in ok).items())},
        "negatives_with_picture": sum(r["pictures"] for r in ok),
        "negatives_dropped": sum(dropped.values()), "negatives_dropped_by_reason": dict(dropped),
        "seconds": round(seconds, 2), "shards_reused": reused,
    } | ({"slots": list(SLOT_TYPES[config.format])} if config.format in SLOT_TYPES else {})
    atomic_write_json(out / "summary.json", summary)
    return summary
