"""`concrete-jungle plant --estimate`: the bill of a plant before it runs, without loading a model (docs/scale.md,
"The bill before the run").

The input is read as the keyword stage reads it (the same part, limit, pre-checks and duplicate ids) and a few of
its pictures are opened; no spaCy pipeline, LLM, editor or scorer is loaded or called. Every figure says how it was
had: ``counted`` (from the input, as the plant counts it), ``measured`` (on this input's pictures, or a rate from
the user's throughput table), ``estimated`` (counted figures through the plant's arithmetic: an upper bound where a
later stage may reject) or ``assumed`` (a documented anchor, not this hardware).
"""

from __future__ import annotations

import importlib.util
import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import PlantError
from .config import PlantConfig

COUNTED, MEASURED, ESTIMATED, ASSUMED, UNKNOWN = "counted", "measured", "estimated", "assumed", "not known"
LLM_CAPTIONERS = ("openai", "transformers")
PICTURES_PROBED = 16
TAR_BLOCK = 512
# means over SugarCrepe's 4,345 COCO captions (`concrete-jungle keywords` on them, hc; docs/scale.md)
KEYWORD_LINE_BYTES = 893
META_BYTES = 958  # a record's json member with an LLM captioner's and SDXL-Turbo's names
MANIFEST_ROW_BYTES = 165  # written twice: the shard's manifest and the part's
CACHE_SIDE = 224  # `concrete-jungle cache` for a 224-px model (ViT-B-32): 2 x 3 x 224 x 224 bytes a record
# documented anchors (docs/scale.md): published figures, not measured here
SDXL_TURBO_A100 = (0.207, 0.067)  # s a 512 px text-to-image picture (fp16, batch 1), s of it one UNet step
QWEN3_32B_H100_TOKENS = 4006.0  # tokens/s, prompt and reply, vLLM on one H100 (GPUStack's performance lab)
CHARS_PER_TOKEN = 4.0
SPACY_KEYWORDS = 839.0  # captions/s of `keywords --workers 1` on the development machine (docs/benchmarks.md)


@dataclass(frozen=True)
class StageRate:
    """A stage's throughput: ``per_second`` items (keywords: captions; rewrite: LLM requests; edit: pictures) on
    ``gpus`` GPUs (0: a CPU stage), measured on ``hardware`` by ``source``."""

    per_second: float
    gpus: float = 1.0
    hardware: str = ""
    source: str = ""
    basis: str = MEASURED

    def __post_init__(self):
        from ..configs import ConfigError

        if not self.per_second > 0 or self.gpus < 0:
            raise ConfigError(f"a throughput of {self.per_second}/s on {self.gpus} GPUs is not a rate; give "
                              "per_second > 0 and gpus >= 0")
        if self.basis not in (MEASURED, ASSUMED):
            raise ConfigError(f"a rate's basis is measured or assumed, not {self.basis!r}")


@dataclass(frozen=True)
class ThroughputTable:
    """The user's own rates (a YAML or JSON file: ``--throughput FILE``), in place of the documented anchors."""

    keywords: StageRate | None = None
    rewrite: StageRate | None = None
    edit: StageRate | None = None


def load_throughput(path: str | Path) -> ThroughputTable:
    import yaml

    from ..configs import ConfigError, from_dict

    path = Path(path)
    if not path.is_file():
        raise PlantError(f"throughput table not found: {path}; write one (docs/scale.md) or leave --throughput out "
                         "to use the documented anchors")
    data = yaml.safe_load(path.read_text()) or {}
    stages = [f.name for f in fields(ThroughputTable)]
    unknown = sorted(set(data) - set(stages)) if isinstance(data, dict) else [type(data).__name__]
    if unknown:
        raise ConfigError(f"{path}: {unknown} is no stage; a throughput table maps {', '.join(stages)} to a rate each "
                          "(per_second, gpus, hardware, source, basis)")
    return ThroughputTable(**{stage: from_dict(StageRate, rate, where=f"{path}: {stage}")
                              for stage, rate in data.items()})


def record_rate(path: str | Path, stage: str, rate: StageRate) -> None:
    """Put ``rate`` into the throughput table at ``path`` as ``stage`` (the others kept): what a benchmark that
    measured a stage writes, for `plant --estimate --throughput`."""
    import yaml

    from ..records import atomic_write_text

    path = Path(path)
    table = asdict(load_throughput(path)) if path.is_file() else {}
    table[stage] = asdict(rate)
    atomic_write_text(path, yaml.safe_dump({k: v for k, v in table.items() if v is not None}, sort_keys=False))


def english_stop_words() -> frozenset[str]:
    """spaCy's English stop words (the pre-check's), read from its file: importing spaCy would import torch."""
    spec = importlib.util.find_spec("spacy")
    path = Path(spec.origin).parent / "lang" / "en" / "stop_words.py"
    module_spec = importlib.util.spec_from_file_location("concrete_jungle_stop_words", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return frozenset(module.STOP_WORDS)


@dataclass
class InputCount:
    """What `count_input` counted."""

    captions: int = 0
    anchors: int = 0  # through the pre-checks
    caption_bytes: int = 0  # of the anchors' captions
    missing_images: int = 0
    unchecked_images: int = 0  # in stores: their presence is not checked here
    skipped: Counter = field(default_factory=Counter)  # by reason
    probe: list[str] = field(default_factory=list)  # the first anchors' picture names


def count_input(config: PlantConfig) -> InputCount:
    """The samples of this part (and --limit) through the keyword stage's pre-checks, as it runs them."""
    from ..sources import UnsafePathError, anchor_caption, join_under, read_samples
    from ..sources.stores import is_located
    from .concreteness import load_ratings
    from .keyword_job import FilterConfig, precheck
    from .stages import part_of, reason_kind
    from .streams import SeenIds

    ratings, stop_words, limits = load_ratings(config.scale), english_stop_words(), FilterConfig()
    seen, count = SeenIds(), InputCount()
    samples = itertools.islice(read_samples(config.captions, fmt=config.format, split=config.split,
                                            columns=config.columns), config.limit)
    for sample in samples:
        if config.num_shards > 1 and part_of(sample.id, config.num_shards) != config.shard_index:
            continue
        count.captions += 1
        repeated = seen.add(sample.id)
        caption = anchor_caption(sample.captions) if sample.error is None else None
        reason = sample.error or ("duplicate id" if repeated else precheck(caption, ratings, stop_words, limits))
        if reason:
            count.skipped[reason_kind(reason)] += 1
            continue
        count.anchors += 1
        count.caption_bytes += len(caption.encode("utf-8"))
        if is_located(sample.image):
            count.unchecked_images += 1
        else:
            try:
                present = bool(sample.image) and join_under(config.images, sample.image).is_file()
            except UnsafePathError:
                present = False
            count.missing_images += not present
            if not present:
                continue
        if len(count.probe) < PICTURES_PROBED:
            count.probe.append(sample.image)
    return count


def picture_bytes(config: PlantConfig, names: list[str], side: int | None) -> tuple[float, float | None, int]:
    """(mean anchor bytes as stored, mean bytes of the same pictures as JPEGs of ``side`` px, pictures read) over
    the pictures of ``names`` that open: what a shard holds for them (the anchor's own bytes when it is a JPEG)."""
    from ..concretebatch import encode_jpeg
    from .stages import load_image

    anchors, resized = [], []
    for name in names:
        image, data, reason = load_image(Path(config.images), name)
        if reason is not None:
            continue
        anchors.append(len(data) if data[:3] == b"\xff\xd8\xff" else len(encode_jpeg(image)))
        if side:
            resized.append(len(encode_jpeg(image.resize((side, side)))))
    if not anchors:
        return 0.0, None, 0
    return sum(anchors) / len(anchors), (sum(resized) / len(resized) if side else None), len(anchors)


def tar_bytes(size: float) -> int:
    """A tar member's bytes: its header block and its data padded to whole blocks."""
    return TAR_BLOCK + -(-int(round(size)) // TAR_BLOCK) * TAR_BLOCK


def figure(name: str, value, unit: str, basis: str, how: str) -> dict:
    return {"figure": name, "value": value, "unit": unit, "basis": basis, "how": how}


def hours(count: int, rate: StageRate | None, what: str) -> dict:
    """A stage's GPU-hours (CPU-hours for a CPU stage: a rate on 0 GPUs) for ``count`` items at ``rate``."""
    if rate is None:
        return figure(f"{what} GPU-hours", None, "GPU-hours", UNKNOWN, "no rate known for this plugin: measure it "
                      "and give it with --throughput FILE (docs/scale.md)")
    unit = "GPU-hours" if rate.gpus else "CPU-hours"
    device = f"{rate.gpus:g} GPU(s)" if rate.gpus else "1 CPU worker"
    return figure(f"{what} {unit}", round(count / rate.per_second / 3600 * (rate.gpus or 1.0), 3), unit, rate.basis,
                  f"{count:,} / {rate.per_second:.4g} a second on {device} ({rate.hardware}; {rate.source})")


def edit_rate(config: PlantConfig) -> StageRate | None:
    if config.editor != "diffusers":
        return None
    options = config.editor_options
    steps, strength, side = options.get("steps", 4), options.get("strength", 0.75), options.get("size", 512)
    picture, step = SDXL_TURBO_A100
    unet_steps = max(1, int(steps * strength))
    seconds = (picture + (unet_steps - 1) * step) * (side / 512) ** 2
    return StageRate(1 / seconds, 1, "one A100, fp16, batch 1", f"Stability AI's {picture * 1000:.0f} ms a 512 px "
                     f"SDXL-Turbo picture, {step * 1000:.0f} ms of it one UNet step; img2img runs int({steps} x "
                     f"{strength}) = {unet_steps} step(s) (the VAE encode not counted); time taken as pixels "
                     f"({side} px)", ASSUMED)


def rewrite_rate(config: PlantConfig, mean_caption_bytes: float) -> StageRate | None:
    if config.captioner not in LLM_CAPTIONERS:
        return None
    from .captioners.prompt import build_prompt

    prompt = build_prompt("x" * round(mean_caption_bytes), "keyword", "object", config.mode)
    tokens = (len(prompt) + mean_caption_bytes) / CHARS_PER_TOKEN  # the prompt, then a reply as long as the caption
    return StageRate(QWEN3_32B_H100_TOKENS / tokens, 1, "a 32B model (Qwen3-32B) behind vLLM on one H100",
                     f"{QWEN3_32B_H100_TOKENS:,.0f} tokens/s (GPUStack's vLLM baseline, short prompts) / {tokens:.0f} "
                     f"tokens a request (prompt and reply at {CHARS_PER_TOKEN:g} characters a token)", ASSUMED)


def estimate(config: PlantConfig, throughput: ThroughputTable | None = None) -> dict:
    """Every figure of the bill, keyed: ``{"figures": {key: {figure, value, unit, basis, how}}, ...}``."""
    from ..sources import expand_paths
    from .plugins import target

    expand_paths(config.captions)
    if not Path(config.images).is_dir():
        raise PlantError(f"image directory not found: {config.images}; pass the folder the captions' image paths "
                         "are relative to with --images")
    target("captioner", config.captioner)  # a name that resolves to nothing is an error; nothing is imported
    target("editor", config.editor)
    count = count_input(config)
    figures = work_figures(config, count)
    figures |= disk_figures(config, count, figures["records"]["value"])
    figures |= time_figures(config, count, figures["records"]["value"], throughput or ThroughputTable())
    return {"part": config.part, "captioner": config.captioner, "editor": config.editor, "figures": figures}


def work_figures(config: PlantConfig, count: InputCount) -> dict[str, dict]:
    """How many samples, anchors, requests, edits and scoring passes."""
    llm, editing, anchors = config.captioner in LLM_CAPTIONERS, config.editor != "none", count.anchors
    part = "" if config.num_shards == 1 else f" in part {config.shard_index} of {config.num_shards}"
    limit = f", the first {config.limit:,} (--limit)" if config.limit else ""
    reasons = ", ".join(f"{reason} ({n:,})" for reason, n in count.skipped.most_common()) or "none"
    records = anchors - count.missing_images
    unchecked = f"; {count.unchecked_images:,} pictures in stores not checked" if count.unchecked_images else ""
    requests = "LLM requests" if llm else f"rewrites ({config.captioner}, no LLM)"
    return {
        "captions": figure("captions read", count.captions, "samples", COUNTED, f"the input's samples{part}{limit}"),
        "skipped": figure("skipped before the parse", sum(count.skipped.values()), "samples", COUNTED,
                          f"the keyword stage's pre-checks and unreadable records: {reasons}"),
        "anchors": figure("anchors after filters", anchors, "anchors", COUNTED,
                          "captions that pass the pre-checks (words, English, length, unique id)"),
        "anchors_with_keyword": figure(
            "anchors with a keyword", anchors, "anchors", ESTIMATED, "at most the anchors after filters: one whose "
            "parse finds no rated word is skipped (not run here; none of SugarCrepe's 4,345 COCO captions was)"),
        "rewrite_requests": figure(requests, anchors, "requests", ESTIMATED,
                                   "one an anchor with a keyword, first attempts"),
        "rewrite_requests_at_most": figure(
            f"{requests} with the retry budget", anchors * config.max_attempts, "requests", ESTIMATED,
            f"a rejected rewrite is asked again: at most --max-attempts {config.max_attempts} an anchor"),
        "missing_images": figure("anchors whose picture is missing", count.missing_images, "anchors", COUNTED,
                                 f"rejected after their rewrite{unchecked}"),
        "records": figure("records written", records, "records", ESTIMATED, "anchors with a keyword and a picture: "
                          "at most (a rewrite rejected after every attempt writes none)"),
        "edits": figure("edits", records if editing else 0, "pictures", ESTIMATED,
                        f"{records:,} records x 1 edit each" if editing else "editor none: the anchor is the "
                        "negative picture"),
        "scoring_passes": scoring_passes(config, records),
    }


def scoring_passes(config: PlantConfig, records: int) -> dict:
    """One pass a scorer a made pair (a gated pair is scored too: it is made before it is gated)."""
    if config.scoring is None:
        return figure("scoring passes", 0, "passes", COUNTED, "scoring off (--score turns it on)")
    names = list(config.scoring.scorers)
    return figure("scoring passes", records * len(names), "passes", ESTIMATED,
                  f"{records:,} records x {len(names)} scorer(s): {', '.join(names)}")


def disk_figures(config: PlantConfig, count: InputCount, records: int) -> dict[str, dict]:
    """Disk for the shards (from this input's pictures), the keyword file and manifests, and the training cache."""
    editing = config.editor != "none"
    side = config.editor_options.get("size", 512) if config.editor == "diffusers" else None
    anchor, edited, probed = picture_bytes(config, count.probe, side)
    caption = mean_caption_bytes(count)
    f = {}
    if probed:
        # the negative: the edited picture's JPEG, the anchor's bytes again (editor none), or a plugin's own size
        negative = edited if edited is not None else anchor
        per_record = tar_bytes(anchor) + tar_bytes(negative) + 2 * tar_bytes(caption) + tar_bytes(META_BYTES)
        if edited is not None:
            how = f"negative {negative / 1024:.1f} KB (measured: those pictures as {side} px JPEGs)"
        elif editing:
            how = "negative as large as the anchor (assumed: a plugin editor's pictures are its own)"
        else:
            how = "negative: the anchor's bytes again"
        basis = ASSUMED if editing and edited is None else ESTIMATED
        f["bytes_per_record"] = figure(
            "shard bytes a record", per_record, "bytes", basis, f"anchor {anchor / 1024:.1f} KB (measured: mean of "
            f"{probed} of the input's pictures), {how}, captions {caption:.0f} B (counted), metadata {META_BYTES} B "
            "(assumed: the mean on COCO captions), in 5 tar members of 512-byte blocks")
        f["shard_bytes"] = figure("shards", records * per_record, "bytes", basis, f"{records:,} records x "
                                  f"{per_record:,} B")
    else:
        f["shard_bytes"] = figure("shards", None, "bytes", UNKNOWN, "none of the first pictures could be read")
    other = count.captions * (KEYWORD_LINE_BYTES + 2 * MANIFEST_ROW_BYTES)
    f["other_bytes"] = figure("keyword file and manifests", other, "bytes", ASSUMED,
                              f"{count.captions:,} captions x ({KEYWORD_LINE_BYTES} B a keyword line + 2 x "
                              f"{MANIFEST_ROW_BYTES} B of manifest rows): means on COCO captions")
    f["cache_bytes"] = figure("training image cache", records * 2 * 3 * CACHE_SIDE ** 2, "bytes", ESTIMATED,
                              f"`concrete-jungle cache` for a {CACHE_SIDE}-px model: 2 x 3 x {CACHE_SIDE} x "
                              f"{CACHE_SIDE} bytes a record")
    return f


def time_figures(config: PlantConfig, count: InputCount, records: int, table: ThroughputTable) -> dict[str, dict]:
    """Hours per stage: the counts over the user's measured rates, or the documented anchors."""
    f = {"keywords_hours": hours(count.anchors, table.keywords or StageRate(
        SPACY_KEYWORDS, 0, "the development machine", "docs/benchmarks.md, 'Keyword sampler throughput'", ASSUMED),
        "keywords")}
    if config.captioner in LLM_CAPTIONERS or table.rewrite:
        rate = table.rewrite or rewrite_rate(config, mean_caption_bytes(count))
        f["rewrite_hours"] = hours(count.anchors, rate, "rewrite")
        f["rewrite_hours_at_most"] = hours(count.anchors * config.max_attempts, rate, "rewrite at most,")
    elif config.captioner == "rules":
        f["rewrite_hours"] = figure("rewrite GPU-hours", 0, "GPU-hours", COUNTED, "the rules captioner runs on CPUs")
    else:
        f["rewrite_hours"] = hours(count.anchors, None, "rewrite")
    if config.editor != "none":
        f["edit_hours"] = hours(records, table.edit or edit_rate(config), "edit")
    else:
        f["edit_hours"] = figure("edit GPU-hours", 0, "GPU-hours", COUNTED, "editor none: no picture is made")
    f["scoring_hours"] = figure("scoring GPU-hours", 0, "GPU-hours", COUNTED, "scoring off") if config.scoring is None \
        else figure("scoring GPU-hours", None, "GPU-hours", UNKNOWN, "not measured yet: no GPU was available; the "
                    "scorers' rate is in no throughput table")
    stages = [f[k] for k in ("rewrite_hours", "edit_hours", "scoring_hours") if f[k]["unit"] == "GPU-hours"]
    known = [x for x in stages if x["value"] is not None]
    bases = {x["basis"] for x in known}
    basis = UNKNOWN if len(known) < len(stages) else next((b for b in (ASSUMED, MEASURED) if b in bases), COUNTED)
    f["gpu_hours"] = figure("GPU-hours in all", round(sum(x["value"] for x in known), 3), "GPU-hours", basis,
                            "rewrite (first attempts) + edit + scoring" + (
                                "; a stage without a known rate is left out" if len(known) < len(stages) else ""))
    return f


def mean_caption_bytes(count: InputCount) -> float:
    return count.caption_bytes / count.anchors if count.anchors else 0.0


def readable(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        for scale, name in ((2 ** 40, "TB"), (2 ** 30, "GB"), (2 ** 20, "MB"), (2 ** 10, "KB")):
            if value >= scale:
                return f"{value / scale:,.1f} {name}"
        return f"{value:,} B"
    if unit.endswith("hours"):
        return f"{value:,.2f} h"
    return f"{value:,}"


def estimate_table(result: dict):
    from rich.table import Table

    table = Table(title=f"plant --estimate (part {result['part']}; captioner {result['captioner']}, editor "
                        f"{result['editor']}): no model loaded")
    for column in ("figure", "value", "basis", "how"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for item in result["figures"].values():
        table.add_row(item["figure"], readable(item["value"], item["unit"]), item["basis"], item["how"])
    return table
