"""Dataset analysis (paper §3.1-3.2, docs/method.md §8): how much of the gradient reaches the hard negative.

`gradient_share_by_batch_size` reproduces the paper's Fig. 6: the hard-negative gradient share
``mean_a p_{a,h(a)} / (1 - p_aa)`` (docs/method.md §5, from `loss.hard_negative_diagnostics`) of InfoNCE and of each
margin schedule, for batches of N anchors drawn from a model's real features on a ConcreteBatch. The
share falls as N grows (more easy negatives share the softmax) and rises with a positive margin.

Every statistic reads a record's first negative (``neg.jpg``/``neg.txt``), as the paper's records hold one; a
record with K > 1 negatives is counted and said so. A negative without a picture (a caption, as imported from
NegCLIP or CE-CLIP) has a zero row among the features, marked ``neg_has_picture: false`` in its metadata: it is
left out of the image-side quantities (T2I, image-image cosine, DINOScore: null, and counted) and of the image
rows of the gradient share, and counts in the text-side ones as any other.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from ..loss import hard_negative_diagnostics
from ..plant.scorers.dino import DinoScorer  # DINOScore: the plant's image_sim scorer, the same class

SCHEDULES = ("none", "static", "adaptive", "inverse")


def gradient_share_samples(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    concreteness: torch.Tensor,
    logit_scale: float,
    batch_sizes: list[int],
    schedules=SCHEDULES,
    batches: int = 8,
    seed: int = 0,
    has_negative_image: torch.Tensor | None = None,
) -> dict[str, dict[int, list[float]]]:
    """The share of each of ``batches`` random batches of N anchors, per schedule and N.

    Features are ``[anchors; negatives]`` rows of M pairs (2M x D, L2-normalised); a batch of N picks N
    pairs and keeps each anchor with its own negative; every schedule sees the same batches.
    ``has_negative_image`` (M bools, default all): which negatives have a picture; the rows of those without
    are masked out of the loss's softmax (`loss.layout`).
    """
    m = concreteness.shape[0]
    too_big = [n for n in batch_sizes if n > m]
    if too_big:
        raise ValueError(f"batch sizes {too_big} exceed the {m} pairs available; pass smaller --batch-sizes")
    g = torch.Generator().manual_seed(seed)
    out: dict[str, dict[int, list[float]]] = {s: {} for s in schedules}
    for n in batch_sizes:
        picks = [torch.randperm(m, generator=g)[:n] for _ in range(batches)]
        for schedule in schedules:
            shares = []
            for idx in picks:
                rows = torch.cat([idx, idx + m])
                d = hard_negative_diagnostics(image_features[rows], text_features[rows], logit_scale,
                                              concreteness[idx], margin=schedule, has_negative_image=None
                                              if has_negative_image is None else has_negative_image[idx])
                shares.append(d["hn_grad_share"])
            out[schedule][n] = shares
    return out


def gradient_share_by_batch_size(*args, **kwargs) -> dict[str, dict[int, float]]:
    """Mean share over the random batches of `gradient_share_samples`, per schedule and N (Fig. 6)."""
    return means(gradient_share_samples(*args, **kwargs))


def means(samples: dict[str, dict[int, list[float]]]) -> dict[str, dict[int, float]]:
    return {s: {n: sum(v) / len(v) for n, v in pts.items()} for s, pts in samples.items()}


def spread(samples: dict[str, dict[int, list[float]]]) -> dict[str, dict[int, float]]:
    """Standard deviation over the batches, per schedule and N (0 for a single batch)."""
    def sd(v):
        mean = sum(v) / len(v)
        return math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0

    return {s: {n: sd(v) for n, v in pts.items()} for s, pts in samples.items()}


def feature_cache_path(clip, source, limit: int | None, dino, cache_dir: str | Path, trim_text: bool = True) -> Path:
    """Where the features of (model, dataset contents, limit, DINO model, text length) are kept: the dataset is
    named by its shards' recorded digests, so a re-planted dataset (another editor, the same manifest) is encoded
    again and a moved one is not."""
    import hashlib

    from ..concretebatch import dataset_digest

    digest = hashlib.sha1(dataset_digest(source).encode())
    digest.update(f"{limit}|{getattr(dino, 'name', None)}".encode() + (b"" if trim_text else b"|full-context"))
    return Path(cache_dir) / clip.hash / f"{Path(source).name}-{digest.hexdigest()[:16]}"


def concretebatch_features(clip, source, device: str = "cpu", batch_size: int = 64, limit: int | None = None,
                           dino=None, cache_dir: str | Path | None = None, progress: bool = True,
                           partial: bool = False, trim_text: bool = True):
    """(image features, text features, concreteness, metadata, DINO similarities) of a ConcreteBatch under a
    model; features are ``[anchors; first negatives]``, a negative without a picture a zero image row (its
    metadata's ``neg_has_picture`` is false, its DINO similarity None). ``dino`` (a `DinoScorer`) adds
    image-image DINOScores.
    With ``cache_dir`` they are computed once per model and dataset and read back afterwards. ``trim_text``:
    captions at their length (`text_encoding`); False: the full context, as before that existed."""
    if cache_dir is None:
        return _encode_concretebatch(clip, source, device, batch_size, limit, dino, progress, partial, trim_text)
    import json

    from safetensors.torch import load_file

    from ..records import atomic_write_safetensors, atomic_write_text

    path = feature_cache_path(clip, source, limit, dino, cache_dir, trim_text)
    if (path / "metas.json").is_file():
        t = load_file(str(path / "features.safetensors"))
        return (t["image"], t["text"], t["concreteness"], json.loads((path / "metas.json").read_text()),
                [None if math.isnan(s) else s for s in t["dino"].tolist()] if "dino" in t else [])
    image, text, c, metas, dino_scores = _encode_concretebatch(clip, source, device, batch_size, limit, dino, progress,
                                                               partial, trim_text)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {"image": image, "text": text, "concreteness": c} | (  # no DINO similarity: NaN in the file
        {"dino": torch.tensor([math.nan if s is None else s for s in dino_scores])} if dino_scores else {})
    atomic_write_safetensors(path / "features.safetensors", tensors)
    atomic_write_text(path / "metas.json", json.dumps(metas))  # written last: it marks the entry complete
    return image, text, c, metas, dino_scores


@torch.no_grad()
def _encode_concretebatch(clip, source, device: str, batch_size: int, limit: int | None, dino, progress: bool,
                          partial: bool = False, trim_text: bool = True):
    from ..concretebatch import iter_records
    from ..models.text_encoding import encode_text

    dino_scores: list[float | None] = []
    anchors_i, negs_i, anchors_t, negs_t, cs, metas = [], [], [], [], [], []
    buffer: list[dict] = []

    def flush():
        if not buffer:
            return
        prep = lambda ims: torch.stack([clip.preprocess(im) for im in ims]).to(device)  # noqa: E731
        enc_i = lambda ims: F.normalize(clip.model.encode_image(prep(ims)).float(), dim=-1).cpu()  # noqa: E731

        def enc_t(texts):
            tokens = clip.tokenizer(texts).to(device)
            return F.normalize(encode_text(clip.model, tokens, trim=trim_text).float(), dim=-1).cpu()

        anchors_i.append(enc_i([r["image"] for r in buffer]))
        pictured = [r for r in buffer if r["neg_image"] is not None]
        has_picture = torch.tensor([r["neg_image"] is not None for r in buffer])
        negatives = torch.zeros_like(anchors_i[-1])  # a caption without a picture: a zero row, never encoded
        if pictured:
            negatives[has_picture] = enc_i([r["neg_image"] for r in pictured])
        negs_i.append(negatives)
        anchors_t.append(enc_t([r["caption"] for r in buffer]))
        negs_t.append(enc_t([r["neg_caption"] for r in buffer]))
        cs.extend(r["concreteness"] for r in buffer)
        metas.extend(r["meta"] | {"caption": r["caption"], "neg_caption": r["neg_caption"],
                                  "neg_has_picture": r["neg_image"] is not None} for r in buffer)
        if dino is not None:
            scores = iter(dino.similarity([r["image"] for r in pictured], [r["neg_image"] for r in pictured])
                          if pictured else [])
            dino_scores.extend(next(scores) if r["neg_image"] is not None else None for r in buffer)
        buffer.clear()

    from tqdm import tqdm

    total = ok_records(source)
    total = limit if total is None else total if limit is None else min(limit, total)
    for n, record in enumerate(tqdm(iter_records(source, partial), desc=f"encode {Path(source).name}", unit="pair",
                                    total=total, leave=False, disable=not progress)):
        if limit is not None and n >= limit:
            break
        buffer.append(record)
        if len(buffer) == batch_size:
            flush()
    flush()
    if not cs:
        raise ValueError(f"{source} holds no records")
    return (torch.cat(anchors_i + negs_i), torch.cat(anchors_t + negs_t), torch.tensor(cs), metas, dino_scores)


def ok_records(source) -> int | None:
    """How many records a ConcreteBatch holds, for a progress bar's total: the ok rows of its manifest, or of its
    shards' manifests (the finished shards of an unfinished dataset); None where no manifest tells (a list of
    shards, or shards written by other tools)."""
    from ..concretebatch import read_shard_manifests
    from ..records import read_jsonl

    if isinstance(source, list):
        return None
    root = Path(source)
    if (root / "manifest.jsonl").is_file():
        return sum(r.get("status") == "ok" for r in read_jsonl(root / "manifest.jsonl"))
    shards = read_shard_manifests(root)
    if not shards or set(shards) != {int(p.stem.split("-")[1]) for p in root.glob("shard-*.tar")}:
        return None
    return sum(r.get("status") == "ok" for rows in shards.values() for r in rows)


# ------------------------------------------------------------------------------------------ dataset statistics

# the paper's Table 1, by dataset mode
PAPER_TABLE1 = {
    "wo": {"mean_c": 4.29, "median_c": 4.63, "i2t": 0.8712, "t2i": 0.4433, "bertscore": 0.8992, "clip_l": 0.9197,
           "dino": 0.6514, "clip_v": 0.7168, "unique_keywords": 11050},
    "lc": {"mean_c": 3.81, "median_c": 3.89, "i2t": 0.8357, "t2i": 0.4020, "bertscore": 0.8981, "clip_l": 0.9279,
           "dino": 0.6707, "clip_v": 0.7270, "unique_keywords": 11034},
    "hc": {"mean_c": 4.77, "median_c": 4.85, "i2t": 0.9225, "t2i": 0.5087, "bertscore": 0.8907, "clip_l": 0.9029,
           "dino": 0.6225, "clip_v": 0.7000, "unique_keywords": 11190},
}


def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over words."""
    x, y = a.lower().split(), b.lower().split()
    prev = list(range(len(y) + 1))
    for i, wx in enumerate(x, 1):
        cur = [i]
        for j, wy in enumerate(y, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (wx != wy)))
        prev = cur
    return prev[-1]


def bertscore_f1(candidates: list[str], references: list[str], model: str = "roberta-large",
                 num_layers: int | None = None, rescale: bool = True, device: str = "cpu") -> list[float]:
    """BERTScore F1 with the `bert-score` package (paper: RoBERTa-large with baseline rescaling), as the plant's
    ``text_sim`` scorer computes it."""
    from ..plant.scorers.bertscore import BERTScoreScorer

    return BERTScoreScorer(model, num_layers, rescale, device=device).f1(candidates, references)


def negative_picture(meta: dict) -> str:
    """Whose picture a record's first negative has: ``own``, ``anchor`` (a text-only negative of `plant --editor
    none`, its picture the anchor's) or ``none`` (a caption without a picture). Metadata cached before pictures
    could be missing have no ``neg_has_picture``: every negative then had one."""
    if not meta.get("neg_has_picture", True):
        return "none"
    return "anchor" if meta.get("neg_image_is_anchor") else "own"


def negatives_in(meta: dict) -> int:
    """K: how many negatives the record holds (its json lists them in ``negatives`` for K > 1)."""
    return len(meta.get("negatives") or [None])


def pair_rows(image: torch.Tensor, text: torch.Tensor, metas: list[dict], scale: float,
              dino: list[float | None], bertscore: list[float] | None) -> list[dict]:
    """One row per pair (a record and its first negative): the Table 1 quantities of docs/method.md §8 before
    averaging; ``negative_picture`` (`negative_picture`) and ``negatives`` (K) say what the record holds."""
    m = len(metas)
    v, v2, t, t2 = image[:m], image[m:], text[:m], text[m:]
    dot = lambda a, b: (a * b).sum(-1)  # noqa: E731
    rows = []
    for i, meta in enumerate(metas):
        # image-side statistics say nothing of a negative whose picture is its anchor's, or that has none (None)
        picture = negative_picture(meta)
        own = picture == "own"
        row = {"id": meta["id"], "category": meta.get("category"), "keyword": meta.get("keyword"),
               "concreteness": float(meta["concreteness"]),
               "logit_gap": float(scale * (dot(v[i], t[i]) - dot(v[i], t2[i]))),
               "i2t": bool(dot(v[i], t[i]) > dot(v[i], t2[i])),
               "t2i": bool(dot(v[i], t[i]) > dot(v2[i], t[i])) if own else None,
               "clip_l": float(dot(t[i], t2[i])), "clip_v": float(dot(v[i], v2[i])) if own else None,
               "edit_distance": word_edit_distance(meta["caption"], meta["neg_caption"]),
               "negative_picture": picture, "negatives": negatives_in(meta)}
        if dino:
            row["dino"] = dino[i] if own else None
        if bertscore is not None:
            row["bertscore"] = bertscore[i]
        rows.append(row)
    return rows


def summarize_rows(rows: list[dict]) -> dict:
    from ..records import mean_median

    def mean(k):  # over the pairs where the statistic applies (image-side ones: not for text-only negatives)
        values = [float(r[k]) for r in rows if r[k] is not None]
        return sum(values) / len(values) if values else None

    mean_c, median_c = mean_median([r["concreteness"] for r in rows])
    out = {"pairs": len(rows), "text_only_pairs": sum(r["negative_picture"] == "anchor" for r in rows),
           "no_picture_pairs": sum(r["negative_picture"] == "none" for r in rows),
           "more_negatives_pairs": sum(r["negatives"] > 1 for r in rows), "mean_c": mean_c,
           "median_c": median_c, "i2t": mean("i2t"), "t2i": mean("t2i"),
           "clip_l": mean("clip_l"), "clip_v": mean("clip_v"), "edit_distance": mean("edit_distance"),
           "unique_keywords": len({r["keyword"].lower() for r in rows if r["keyword"]})}
    for optional in ("dino", "bertscore"):
        if rows and optional in rows[0]:
            out[optional] = mean(optional)
    cats = {}
    for r in rows:
        cats[str(r["category"])] = cats.get(str(r["category"]), 0) + 1  # None: a record of no category
    out["category_shares"] = {k: v / len(rows) for k, v in sorted(cats.items())}
    return out


def analyze_datasets(datasets: list[str | Path], clip, out: str | Path, device: str = "cpu",
                     dino_model: str | None = None, bertscore_model: str | None = None,
                     bertscore_layers: int | None = None, bertscore_rescale: bool = True,
                     limit: int | None = None, cache_dir: str | Path | None = None, progress: bool = True,
                     partial: bool = False, trim_text: bool = True, reference: str | None = None) -> dict:
    """Table 1 statistics, Fig. 5 and per-pair scores for each dataset; writes stats.json and report.md.
    Embeddings are cached in ``cache_dir`` (default ``<out>/embeddings``) by model and dataset. ``trim_text``: as
    in `concretebatch_features`. ``reference``: what the report and the figures call the model (default
    `model_label`)."""
    from ..records import atomic_write_json, atomic_write_text
    from .entailed import entailed_markdown, entailed_shares
    from .planted_scores import gated_pairs, planted_scores_markdown, score_distributions

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dino = DinoScorer(dino_model, device=device) if dino_model else None
    scale = clip.model.logit_scale.exp().item()
    per_dataset, summaries, modes, planted, gated, entailed = {}, {}, {}, {}, {}, {}
    for d in datasets:
        name = Path(d).name
        image, text, _, metas, dino_scores = concretebatch_features(clip, d, device=device, limit=limit, dino=dino,
                                                                    cache_dir=cache_dir or out / "embeddings",
                                                                    progress=progress, partial=partial,
                                                                    trim_text=trim_text)
        bert = (bertscore_f1([m["neg_caption"] for m in metas], [m["caption"] for m in metas], bertscore_model,
                             bertscore_layers, bertscore_rescale, device) if bertscore_model else None)
        per_dataset[name] = pair_rows(image, text, metas, scale, dino_scores, bert)
        summaries[name] = summarize_rows(per_dataset[name])
        modes[name] = metas[0].get("mode")
        entailed[name] = entailed_shares(metas)
        if any(m.get("scores") for m in metas):  # the plant scored its pairs (`plant --score`)
            planted[name], gated[name] = score_distributions(metas), gated_pairs(d)
    scorers = {"reference_clip": clip.identity, "dino": dino.name if dino else None,
               "bertscore": {"model": bertscore_model, "layers": bertscore_layers, "rescaled": bertscore_rescale}
               if bertscore_model else None}
    stats = {"scorers": scorers, "datasets": {n: {"mode": modes[n], "summary": summaries[n],
                                                  "entailment": entailed[n]} | (
        {"planted_scores": planted[n], "gated": gated[n]} if n in planted else {}) for n in summaries},
             "pairs": {n: {r["id"]: {k: v for k, v in r.items() if k not in ("id", "category", "keyword")}
                           for r in rows} for n, rows in per_dataset.items()}}
    atomic_write_json(out / "stats.json", stats)
    from .figures import plot_dataset_figures

    reference = reference or model_label(clip.identity)
    figures = plot_dataset_figures(per_dataset, out, reference)
    report = report_markdown(summaries, modes, scorers, figures, reference)
    atomic_write_text(out / "report.md", report + f"\n{entailed_markdown(entailed)}\n" + (
        f"\n{planted_scores_markdown(planted, gated)}\n" if planted else ""))
    return stats


def model_label(identity: dict) -> str:
    """A model's name for figures and tables: `models.describe_model`'s words, but a checkpoint by its run folder,
    its step and the start of its weights' digest; its full path would wrap inside a title or run off an axis."""
    from ..models import describe_model

    if "checkpoint" not in identity:
        return describe_model(identity)
    path = Path(identity.get("path", "checkpoint"))
    run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return f"checkpoint {path.name} of {run.name} (sha1 {identity['checkpoint'][:8]})"


TABLE1_METRICS = [("mean_c", "Mean c"), ("median_c", "Median c"), ("i2t", "I2T acc."), ("t2i", "T2I acc."),
                  ("bertscore", "BERTScore"), ("clip_l", "text-text cosine (CLIP-L)"), ("dino", "DINOScore"),
                  ("clip_v", "image-image cosine (CLIP-V)"), ("unique_keywords", "# Unique"),
                  ("edit_distance", "Word edit distance")]
IMAGE_SIDE = ("t2i", "clip_v", "dino")  # statistics of the negative image


def no_image_side(summary: dict) -> str | None:
    """Why a dataset has no image-side statistic at all (no negative has a picture of its own), or None."""
    anchor, none = summary.get("text_only_pairs", 0), summary.get("no_picture_pairs", 0)
    if anchor + none < summary["pairs"]:
        return None
    return "text-only" if anchor == summary["pairs"] else "no picture"


def table1_markdown(summaries: dict[str, dict], modes: dict[str, str | None], reference: str | None = None) -> str:
    """Each dataset's statistics beside the paper's Table 1 value for its mode, and the category shares;
    ``reference`` names the model of the I2T/T2I and cosine rows (the paper's is PE-Core-L)."""
    names = list(summaries)
    lines = ["| metric | " + " | ".join(f"{n} | paper D_{modes[n]}" for n in names) + " |",
             "| --- |" + " --- | --- |" * len(names)]
    fmt = lambda v: "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))  # noqa: E731
    for key, label in TABLE1_METRICS:
        cells = []
        for n in names:
            why = no_image_side(summaries[n]) if key in IMAGE_SIDE else None
            ours = f"n/a ({why})" if why else fmt(summaries[n].get(key))
            cells += [ours, fmt(PAPER_TABLE1.get(modes[n] or "", {}).get(key))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Category shares: " + "; ".join(f"{n}: " + ", ".join(f"{k} {v:.0%}" for k, v in
                                                                        summaries[n]["category_shares"].items())
                                                 for n in names)]
    if reference:
        lines += ["", f"I2T, T2I and the cosines are under {reference}; the paper's under PE-Core-L."]
    lines += [f"{note}" for note in dataset_notes(summaries)]
    return "\n".join(lines)


def dataset_notes(summaries: dict[str, dict]) -> list[str]:
    """A sentence per dataset whose negatives (all or some) reuse the anchor image or have no picture, and one
    per dataset whose records hold more than one negative."""
    notes = []
    for n, summary in summaries.items():
        m, k = summary["pairs"], summary.get("text_only_pairs", 0)
        none, more = summary.get("no_picture_pairs", 0), summary.get("more_negatives_pairs", 0)
        if k and not none:
            which = "every pair" if k == m else f"{k} of {m} pairs"
            notes.append(f"{n}: {which} have text-only negatives (the negative image is the anchor, as `plant "
                         "--editor none` makes them): T2I, image-image cosine and DINOScore leave them out.")
        if none:
            why = "the others' negatives have no picture" + (f" ({none}) or reuse the anchor's ({k})" if k else "")
            notes.append(f"{n}: image quantities (T2I, image-image cosine, DINOScore) over {m - none - k} of {m} "
                         f"records: {why}; the text ones (I2T, the logit gap, text-text cosine, BERTScore, edit "
                         f"distance) over all {m}.")
        if more:
            notes.append(f"{n}: {more} of {m} records hold more than one negative; every statistic uses the first "
                         "negative of each (its neg.jpg and neg.txt), as the paper's records hold one.")
    return notes


def describe_scorers(scorers: dict, reference: str | None = None) -> str:
    """The scorers in words; ``reference``: the label the report uses for the reference CLIP, given beside its
    full description when they differ."""
    dino = scorers["dino"].removeprefix("dino:") if scorers["dino"] else "not computed (pass --dino-model)"
    bert = scorers["bertscore"]
    bert = (f"{bert['model']}" + (f", layer {bert['layers']}" if bert["layers"] else "") +
            (", baseline-rescaled" if bert["rescaled"] else ", not rescaled")) if bert else \
        "not computed (pass --bertscore-model)"
    from ..models import describe_model

    full = describe_model(scorers["reference_clip"])
    clip = full if reference in (None, full) else f"{reference}: {full}"
    return f"Reference CLIP: {clip}. DINOv2: {dino}. BERTScore: {bert}."


def report_markdown(summaries: dict[str, dict], modes: dict[str, str | None], scorers: dict, figures,
                    reference: str | None = None) -> str:
    """The analysis's report.md; ``reference``: what the tables and figures call the reference CLIP (default
    `model_label`)."""
    reference = reference or model_label(scorers["reference_clip"])
    lines = ["# Dataset analysis (paper Table 1, Fig. 5)", "",
             describe_scorers(scorers, reference) + " A dash: no scorer given, or no paper value.", "",
             table1_markdown(summaries, modes, reference), ""]
    lines += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(lines) + "\n"
