"""ConcretePlant's stages: keyword sampling -> caption rewrite -> image edit -> ConcreteBatch shards (paper §2.2,
docs/method.md §1-4). An engine (`local`, `ray`) decides where the rewrite and edit stages run; every engine runs
these same functions and writes through `Plant.write_results`, so the records do not depend on the engine.

One run (a "part") handles the samples whose id hashes to ``shard_index`` of ``num_shards``, so K copies on
K GPUs or nodes split a dataset with no coordination; `merge` joins their manifests. Within a part:

1. keywords: `keyword_job.run_keywords` into ``keywords-<i>-of-<K>.jsonl`` (itself resumable);
2. the sampled records are cut into chunks of ``samples_per_shard``; chunk j of part i becomes tar shard ``j * K +
   i``. A chunk is rewritten in batches (with bounded retries of rejected replies), its images are edited, and it
   is written to a temporary tar, renamed, then its manifest rows are written atomically. A restart skips chunks
   whose manifest exists and redoes the rest identically (every choice is seeded by sample id and attempt), so
   ``kill -9`` at any moment loses nothing and duplicates nothing.
"""

from __future__ import annotations

import itertools
import re
import sys
import time
from collections import Counter
from pathlib import Path

from PIL import Image

from ..concretebatch import (
    SHARD_PATTERN,
    ShardWriter,
    encode_jpeg,
    picture,
    sample_key,
    shard_files,
    shard_problem,
    write_shard_manifest,
)
from ..errors import JobError, PlantError
from ..files.locks import locked
from ..images import ImageRejected
from ..nlp import load_spacy
from ..records import atomic_write_json, atomic_write_text, differing, read_jsonl
from ..sources import UnsafePathError
from ..sources.stores import StoreError, read_named
from .captioners import Captioner, RewriteRequest
from .captioners.prompt import EXAMPLES, PROMPT_TEMPLATE
from .captioners.validation import check_rewrite, clean_reply
from .concreteness import load_ratings
from .config import PlantConfig
from .editors import Editor, checked_meta_fields
from .gates import GatedWriter, regate_shards
from .keyword_job import run_keywords
from .keywords import sample_rng
from .scorers import ScorePair
from .scoring import score_and_gate
from .streams import AtomicJsonl, ValueTally, read_records


def part_of(sample_id: str, num_shards: int) -> int:
    return sample_rng(0, f"part\x00{sample_id}").getrandbits(32) % num_shards


def package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("concrete-jungle", "torch", "open-clip-torch", "spacy", "diffusers", "transformers", "webdataset"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def load_image(root: Path, name: str | None) -> tuple[Image.Image | None, bytes | None, str | None]:
    """(image, original bytes, None) or (None, None, reason): the file, or the image inside a store, read and
    checked safely (`stores.read_named`)."""
    if not name:
        return None, None, "no image file named for this sample"
    try:
        image, data = read_named(root, name)
    except (UnsafePathError, ImageRejected, StoreError) as e:
        return None, None, str(e)
    return image.convert("RGB"), data, None


def check_part_count(out: Path, num_shards: int) -> None:
    """A folder split into K parts takes parts of K only. The part files (and the lock of a part in progress) say
    what K is before config.yaml does, which a part writes only after its keywords: so a second job started with
    another --num-shards while the first runs is refused too, instead of writing parts no merge can join."""
    for path in sorted(out.iterdir()):
        found = re.fullmatch(r"(\.plant|keywords|manifest|rejects|summary)-\d{5,}-of-(\d{5,})\..*", path.name)
        if found and int(found[2]) != num_shards:
            k = int(found[2])
            raise PlantError(f"{out} is split into {k} part(s) by another run, running or stopped ({path.name}); "
                             f"run this one with --num-shards {k} too, or write to another --out")


def check_config_matches(out: Path, settings: dict) -> None:
    import yaml

    path = out / "config.yaml"
    if not path.exists():
        return
    previous = (yaml.safe_load(path.read_text()) or {}).get("dataset", {})
    # scoring is left out of the settings when off: a dataset scored before is not resumed without its scores
    changed = sorted(k for k in settings.keys() | ({"scoring"} & previous.keys()) if previous.get(k) != settings.get(k))
    if changed:
        raise PlantError(f"{out} holds a dataset made with other settings ({differing(changed)}, see "
                         f"{path}); pass another --out, or delete it to start over")


class Plant:
    def __init__(self, config: PlantConfig, captioner: Captioner | None = None, editor: Editor | None = None,
                 progress: bool = True):
        self.config = config
        self.out = Path(config.out)
        self.images = Path(config.images)
        # loaded plugins a caller hands in (the local engine uses them instead of building its own from the config)
        self.given_captioner, self.given_editor = captioner, editor
        self.progress = progress
        self.first_batch_at: float | None = None  # when this run wrote its first edited batch

    # -- stage 1
    @property
    def keyword_file(self) -> Path:
        return self.out / f"keywords-{self.config.part}.jsonl"

    def sample_keywords(self, extractor=None) -> int:
        """Stage 1 into `keyword_file`; the number of samples with a keyword. ``extractor`` is an engine's way of
        finding the candidates (None: in this process)."""
        c = self.config
        summary, _ = run_keywords(
            list(c.captions), str(self.keyword_file), c.sampler, load_ratings(c.scale), load_spacy(c.spacy_model),
            fmt=c.format, split=c.split, columns=c.columns, progress=self.progress, extractor=extractor,
            limit=c.limit, keep=None if c.num_shards == 1 else (lambda i: part_of(i, c.num_shards) == c.shard_index))
        return summary["count"]

    # -- stage 2
    def rewrite(self, captioner: Captioner, batch: list[dict]) -> list[tuple[str | None, str | None, int]]:
        """(new caption, reject reason, attempts) per record; rejected replies are asked again with a new seed."""
        c = self.config
        results: list[tuple[str | None, str | None, int]] = [(None, "not attempted", 0)] * len(batch)
        todo = list(range(len(batch)))
        for attempt in range(c.max_attempts):
            if not todo:
                break
            requests = [RewriteRequest(batch[i]["id"], batch[i]["caption"], batch[i]["keyword"],
                                       tuple(batch[i]["span"]), batch[i]["category"], c.mode, attempt,
                                       c.sampler.seed) for i in todo]
            replies = checked_replies(captioner, requests, call_plugin("captioner", captioner, "rewrite", requests))
            retry = []
            for i, reply in zip(todo, replies):
                text = clean_reply(reply.text) if reply.error is None else ""
                reason = reply.error or check_rewrite(batch[i]["caption"], tuple(batch[i]["span"]),
                                                      batch[i]["category"], text)
                results[i] = (text if reason is None else None, reason, attempt + 1)
                if reason is not None:
                    retry.append(i)
            todo = retry
        return results

    def run(self, engine) -> dict:
        """The whole part through ``engine``, a module with ``extractor(config)`` (the keyword stage's candidate
        extractor, or None) and ``process(plant, batches, n_done, total)`` (rewrite, edit and `write_results`
        the batches left; returns the captioner's and editor's names)."""
        c = self.config
        started, self.first_batch_at = time.perf_counter(), None
        c.check_inputs()
        for note in c.check_plugins(captioner=self.given_captioner is None, editor=self.given_editor is None):
            print(f"plant: {note}", file=sys.stderr)
        with locked(self.out / f".plant-{c.part}.lock", f"part {c.part} of {self.out}", "concrete-jungle plant"):
            return self._run(engine, started)

    def _run(self, engine, started: float) -> dict:
        c = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        settings = c.dataset_settings()
        check_part_count(self.out, c.num_shards)
        check_config_matches(self.out, settings)
        n_ok = self.sample_keywords(engine.extractor(c))
        shard_of = [j * c.num_shards + c.shard_index for j in range(-(-n_ok // c.samples_per_shard))]
        self.remove_orphans(shard_of)
        done = self.verified_shards(set(shard_of))
        if c.scoring is not None:  # the finished shards decided again under this run's gates, from their scores
            regated, remake = regate_shards(self.out, set(done), c.parsed_gates)
            for index in remake:
                print(f"plant: the gated records of {SHARD_PATTERN.format(index)} are missing or damaged; making it "
                      "again", file=sys.stderr)
                del done[index]
            if regated:
                print(f"plant: {regated} finished shard(s) decided again under the gates "
                      f"{', '.join(c.gates) or '(none)'} from their stored scores (no rewrite, edit or scoring)",
                      file=sys.stderr)
        batches = Batches(self.keyword_file, c, shard_of, set(done), n_ok)
        n_done = sum(done.values())
        if done:
            print(f"plant: reusing {len(done)} finished shard(s) of an earlier run ({n_done} samples); "
                  f"{len(shard_of) - len(done)} to make", file=sys.stderr)
        names = engine.process(self, batches, n_done, n_ok)
        to_first = None if self.first_batch_at is None else self.first_batch_at - started
        return self.finish(shard_of, names, time.perf_counter() - started, to_first, len(done))

    def write_config(self, captioner_name: str, editor_name: str) -> None:
        import yaml

        # the gates of the latest run (they are no dataset setting: a re-plant with others decides again)
        gates = {"gates": list(self.config.gates)} if self.config.scoring is not None else {}
        atomic_write_text(self.out / "config.yaml", yaml.safe_dump({
            "dataset": self.config.dataset_settings(), "captioner_id": captioner_name, "editor_id": editor_name,
            "engine": self.config.engine.name, **gates, "prompt": {"template": PROMPT_TEMPLATE, "examples": EXAMPLES},
            "versions": package_versions(),
        }, sort_keys=False, allow_unicode=True, width=120))

    def remove_orphans(self, shard_of: list[int]) -> None:
        """Delete the temporary files a killed run of this part left (a write is a temporary file renamed into
        place, so they are never data); other parts' files, which may be in flight, are left alone."""
        c = self.config
        name = "" if c.num_shards == 1 else f"-{c.part}"
        mine = [self.out / f"{stem}{name}.{ext}" for stem, ext in (("manifest", "jsonl"), ("rejects", "jsonl"),
                                                                    ("summary", "json"))]
        keywords = self.out / f"keywords-{c.part}"
        mine += [keywords.with_suffix(".jsonl"), keywords.with_name(keywords.name + ".config.json"),
                 keywords.with_name(keywords.name + ".summary.json")]
        for index in shard_of:
            mine += shard_files(self.out, index)[1:]
        for path in mine:
            for orphan in path.parent.glob(f".{path.name}.*.tmp"):
                orphan.unlink(missing_ok=True)

    def verified_shards(self, shard_indices: set[int]) -> dict[int, int]:
        """The finished shards' numbers of manifest rows; a shard that is missing or not the bytes that were
        written (truncated, a flipped byte) loses its manifest, so this run makes it again."""
        done = {index: count_rows(path) for index, path in shard_manifest_files(self.out, shard_indices)}
        for index in sorted(done):
            problem = shard_problem(self.out, index)
            if problem:
                print(f"plant: {problem}; making it again", file=sys.stderr)
                shard, rows, digest = shard_files(self.out, index)
                rows.unlink()  # first: without its rows the shard is not done, whatever else a kill leaves
                digest.unlink(missing_ok=True)
                shard.unlink(missing_ok=True)
                del done[index]
        return done

    def write_results(self, results, bar) -> None:
        """Write edited batches, in order, into their shards: ``results`` yields (shard, last of its shard,
        [(manifest row, record or None)]); a shard is committed with its digest and manifest when its last
        batch is in. A failure throws the shard in progress away; committed shards stay."""
        rejects = Counter()
        writer, gated, rows = None, None, []
        try:
            for shard, last_of_shard, edited in results:
                if self.first_batch_at is None:
                    self.first_batch_at = time.perf_counter()
                if writer is None:
                    writer, rows = ShardWriter(self.out / SHARD_PATTERN.format(shard)), []
                    gated = GatedWriter(self.out, shard)
                for row, record in edited:
                    rows.append(row)
                    if record is not None:  # a kept pair, or one a gate rejected (kept beside the shard)
                        (writer if row["status"] == "ok" else gated).write(*record)
                rejects.update(reason_kind(row["reason"]) for row, _ in edited if row["status"] != "ok")
                bar.update(len(edited))
                bar.set_postfix(rejected=sum(rejects.values()))
                if last_of_shard:
                    gated.commit()
                    write_shard_manifest(self.out, shard, rows, writer.commit())
                    writer = None
        except BaseException:
            if writer is not None:
                writer.abort()
                gated.abort()
            raise

    def edit(self, shard: int, batch: list[dict], rewritten, editor, captioner_name: str,
             scorers=None) -> list[tuple]:
        """Load the anchors, edit them towards the rewritten captions and build each sample's manifest row and
        record ``(key, anchor JPEG, caption, negative JPEG, negative caption, metadata)`` (None for a reject).
        ``scorers`` (`scoring.PairScorers`): score each pair as stored and gate it (its record is kept)."""
        c = self.config
        out, todo = [], []
        for record, (new, reason, attempts) in zip(batch, rewritten):
            row = {"id": record["id"], "shard": SHARD_PATTERN.format(shard), "keyword": record["keyword"],
                   "category": record["category"], "concreteness": record["concreteness"], "attempts": attempts,
                   "engine": c.engine.name}
            image, data = None, None
            if reason is None:
                image, data, reason = load_image(self.images, record.get("image"))
            out.append([row | ({"status": "ok"} if reason is None else {"status": "rejected", "reason": reason}),
                        None])
            if reason is None:
                todo.append((len(out) - 1, record, new, image, data))
        if not todo:
            return [tuple(x) for x in out]
        seeds = [sample_rng(c.sampler.seed, f"edit\x00{r['id']}").getrandbits(32) for _, r, *_ in todo]
        # the anchors are encoded before the editor sees them, and it gets copies: an editor that draws on the
        # images it is given cannot change the stored anchors
        anchors = [data if data[:3] == b"\xff\xd8\xff" else encode_jpeg(image) for _, _, _, image, data in todo]
        prompts = [new for _, _, new, _, _ in todo]
        edited = checked_images(editor, len(todo), call_plugin("editor", editor, "edit",
                                                               [im.copy() for _, _, _, im, _ in todo], prompts, seeds))
        for (at, record, new, image, data), anchor_bytes, neg, seed in zip(todo, anchors, edited, seeds):
            meta = {
                "id": record["id"], "keyword": record["keyword"], "span": record["span"],
                "category": record["category"], "concreteness": record["concreteness"], "rated": record["rated"],
                "mode": c.mode, "scale": record["scale"], "source": record.get("image"), "seed": seed,
                "captioner": captioner_name, "editor": editor.name, "attempts": out[at][0]["attempts"],
                "neg_image_is_anchor": bool(getattr(editor, "reuses_anchor", False)),
                "candidates": record["candidates"],
            }
            if hasattr(editor, "meta_fields"):
                meta |= checked_meta_fields(editor, call_plugin("editor", editor, "meta_fields", record["keyword"],
                                                                record["caption"], new), meta)
            neg_bytes = anchor_bytes if meta["neg_image_is_anchor"] else encode_jpeg(neg)
            out[at][1] = (sample_key(record["id"]), anchor_bytes, record["caption"], neg_bytes, new, meta)
        if scorers is not None:  # the pictures as stored: the scores are those of what is trained on
            pairs = {at: ScorePair(picture(r[1], f"the anchor of {r[5]['id']}"), r[2], None if r[5][
                "neg_image_is_anchor"] else picture(r[3], f"the negative of {r[5]['id']}"), r[4])
                for at, (_, r) in enumerate(out) if r is not None}
            score_and_gate(out, pairs, scorers, c.parsed_gates, call_plugin, c.scoring.entailment_rule())
        return [tuple(x) for x in out]

    def finish(self, shard_of: list[int], names: tuple[str, str], seconds: float, to_first_batch: float | None,
               reused: int = 0) -> dict:
        """Write this part's manifest and rejects; for a single part, the dataset's own files. The summary's
        ``seconds_to_first_batch`` is the run's start-up (keywords, loading the models, starting Ray's actors):
        the rest of ``seconds`` is the steady rate at which a larger job would go. The rows go from the shards'
        manifests and the keyword file to the part's files one at a time."""
        c = self.config
        name = "" if c.num_shards == 1 else f"-{c.part}"
        tally = ManifestTally()
        # a gate passes a pair without its score (an image score of a text-only negative): counted, not hidden
        gates = c.parsed_gates  # parsed once, not for every row
        scored, undecided = 0, {str(g): 0 for g in gates}
        with AtomicJsonl(self.out / f"manifest{name}.jsonl") as manifest, \
                AtomicJsonl(self.out / f"rejects{name}.jsonl") as rejects:
            for row in self.manifest_rows(shard_of):
                manifest.write(row)
                if row["status"] != "ok":
                    rejects.write(row)
                tally.add(row)
                if "scores" in row:
                    scored += 1
                    for g in gates:
                        undecided[str(g)] += row["scores"].get(g.score) is None
        for gate, n in undecided.items():
            if scored and n == scored:
                print(f"note: gate {gate} decided none of the {scored} scored pairs (its score is None for every "
                      "one: text-only negatives have no image score), so it passed them all; drop it, or score "
                      "negatives that have pictures", file=sys.stderr)
        startup = None if to_first_batch is None else round(to_first_batch, 2)
        summary = tally.summary() | {"seconds": round(seconds, 2), "seconds_to_first_batch": startup,
                                     "captioner": names[0], "editor": names[1], "part": c.part,
                                     "engine": c.engine.name, "shards_reused": reused} | (
            {"gates": list(c.gates), "gates_undecided": undecided} if c.scoring is not None else {})
        atomic_write_json(self.out / f"summary{name}.json", summary)
        return summary

    def manifest_rows(self, shard_of: list[int]):
        """The part's manifest rows: its shards' (in shard order), then a row for each sample the keyword stage
        skipped."""
        for _, path in shard_manifest_files(self.out, set(shard_of)):
            yield from read_jsonl(path)
        for r in read_records(self.keyword_file):
            if r["status"] != "ok":
                yield {"id": r["id"], "shard": None, "keyword": None, "category": None, "concreteness": None,
                       "attempts": 0, "status": "rejected", "reason": r["reason"], "stage": "keywords"}


class Batches:
    """The work left to a part, in the batches every engine processes in this order, read from the keyword file
    as they are taken: the j-th chunk of ``samples_per_shard`` samples with a keyword is shard j * K + i, cut into
    batches of ``batch_size``; a batch flagged last completes its shard. Items: (shard, records, last of shard)."""

    def __init__(self, keyword_file: Path, config: PlantConfig, shard_of: list[int], done: set[int], n_ok: int):
        self.keyword_file, self.config, self.shard_of, self.done = keyword_file, config, shard_of, done
        per, size = config.samples_per_shard, config.batch_size
        self.count = sum(-(-min(per, n_ok - j * per) // size) for j, s in enumerate(shard_of) if s not in done)

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        c = self.config
        ok = (r for r in read_records(self.keyword_file) if r["status"] == "ok")
        for shard in self.shard_of:
            chunk = itertools.islice(ok, c.samples_per_shard)
            if shard in self.done:
                for _ in chunk:  # read past it
                    pass
                continue
            batch = list(itertools.islice(chunk, c.batch_size))
            while batch:
                following = list(itertools.islice(chunk, c.batch_size))
                yield shard, batch, not following
                batch = following


class ManifestTally:
    """The summary of manifest rows, added a row at a time (`summarize_manifest` of them all)."""

    def __init__(self):
        self.samples, self.ok = 0, 0
        self.concreteness = ValueTally()
        self.categories: Counter = Counter()
        self.reasons: Counter = Counter()
        self.shards: set[str] = set()  # one name a shard, not a sample

    def add(self, row: dict) -> None:
        self.samples += 1
        if row["status"] == "ok":
            self.ok += 1
            self.concreteness.add(row["concreteness"])
            self.categories[row["category"]] += 1
            self.shards.add(row["shard"])
        else:
            self.reasons[reason_kind(row["reason"])] += 1

    def summary(self) -> dict:
        n = self.ok
        mean, median = self.concreteness.mean_median()
        return {
            "samples": self.samples, "ok": n, "rejected": self.samples - n,
            "mean_concreteness": mean, "median_concreteness": median,
            "category_shares": {k: v / n for k, v in sorted(self.categories.items())} if n else {},
            "rejects_by_reason": dict(self.reasons),
            "shards": len(self.shards),
        }


def count_rows(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def shard_manifest_files(root: Path, shard_indices: set[int]):
    """(index, path) of the complete shards' manifest files among ``shard_indices``, in the order of their names
    (`concretebatch.read_shard_manifests`' order)."""
    for path in sorted((root / "manifests").glob("shard-*.jsonl")):
        index = int(path.stem.split("-")[1])
        if index in shard_indices:
            yield index, path


def call_plugin(kind: str, plugin, method: str, *args):
    """A captioner's or editor's call; what it raises stops the run as one error naming it (the shards already
    committed stay, and the same command resumes once the plugin is fixed). Our own errors pass as they are."""
    try:
        return getattr(plugin, method)(*args)
    except (JobError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a plugin may fail in any way
        raise PlantError(f"{kind} {plugin.name!r} failed in {method}(): {type(e).__name__}: {e}") from e


def checked_replies(captioner, requests: list, replies) -> list:
    """What a captioner returned, held to its contract: one `Reply` per request, in order. Anything else would
    lose samples silently (too few: rejected as never asked; too many: answers shifted onto other samples)."""
    from .captioners import Reply

    replies = list(replies) if isinstance(replies, (list, tuple)) else replies
    if not isinstance(replies, list) or len(replies) != len(requests):
        got = f"{len(replies)} replies" if isinstance(replies, list) else f"a {type(replies).__name__}"
        raise PlantError(f"captioner {captioner.name!r} returned {got} for {len(requests)} requests; a captioner "
                         "returns a list of one Reply per request, in order")
    wrong = next((r for r in replies if not isinstance(r, Reply)), None)
    if wrong is not None:
        raise PlantError(f"captioner {captioner.name!r} returned a {type(wrong).__name__} where a Reply belongs; "
                         "return concrete_jungle.plant.captioners.Reply(text) (or Reply('', error=...) for a failure)")
    return replies


def checked_images(editor, expected: int, images) -> list:
    """What an editor returned, held to its contract: ``expected`` non-empty PIL images, in order (their sizes are
    the editor's: the anchors' own for ``none``, the model's for an image generator)."""
    images = list(images) if isinstance(images, (list, tuple)) else images
    if not isinstance(images, list) or len(images) != expected:
        got = f"{len(images)} images" if isinstance(images, list) else f"a {type(images).__name__}"
        raise PlantError(f"editor {editor.name!r} returned {got} for {expected} anchors; an editor returns a list of "
                         "one PIL image per anchor, in order")
    wrong = next((im for im in images if not isinstance(im, Image.Image)), None)
    if wrong is not None:
        raise PlantError(f"editor {editor.name!r} returned a {type(wrong).__name__} where a PIL image belongs")
    empty = next((im for im in images if 0 in im.size), None)
    if empty is not None:
        raise PlantError(f"editor {editor.name!r} returned an empty image ({empty.size[0]} x {empty.size[1]})")
    return images


def reason_kind(reason: str) -> str:
    """A reject reason without its particulars (file names, words), for counting."""
    return re.split(r"[:('\"]", reason)[0].strip()


def summarize_manifest(rows) -> dict:
    """The summary of manifest rows (any iterable of them)."""
    tally = ManifestTally()
    for row in rows:
        tally.add(row)
    return tally.summary()
