"""Dataset analysis (paper §3.1-3.2, docs/method.md §8): how much of the gradient reaches the hard negative.

`gradient_share_by_batch_size` reproduces the paper's Fig. 6: the hard-negative gradient share
``mean_a p_{a,h(a)} / (1 - p_aa)`` (docs/method.md §5, from `loss.hard_negative_diagnostics`) of InfoNCE and of each
margin schedule, for batches of N anchors drawn from a model's real features on a ConcreteBatch. The
share falls as N grows (more easy negatives share the softmax) and rises with a positive margin.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F

from .loss import hard_negative_diagnostics

SCHEDULES = ("none", "static", "adaptive", "inverse")
LABELS = {"none": "InfoNCE", "static": "static margin 1", "adaptive": "Cement (adaptive)", "inverse": "inverse"}


def gradient_share_by_batch_size(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    concreteness: torch.Tensor,
    logit_scale: float,
    batch_sizes: list[int],
    schedules=SCHEDULES,
    batches: int = 8,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """Mean share over ``batches`` random batches of N anchors, per schedule and N.

    Features are ``[anchors; negatives]`` rows of M pairs (2M x D, L2-normalised); a batch of N picks N
    pairs and keeps each anchor with its own negative.
    """
    m = concreteness.shape[0]
    too_big = [n for n in batch_sizes if n > m]
    if too_big:
        raise ValueError(f"batch sizes {too_big} exceed the {m} pairs available; pass smaller --batch-sizes")
    g = torch.Generator().manual_seed(seed)
    out: dict[str, dict[int, float]] = {s: {} for s in schedules}
    for n in batch_sizes:
        picks = [torch.randperm(m, generator=g)[:n] for _ in range(batches)]
        for schedule in schedules:
            shares = []
            for idx in picks:
                rows = torch.cat([idx, idx + m])
                d = hard_negative_diagnostics(image_features[rows], text_features[rows], logit_scale,
                                              concreteness[idx], margin=schedule)
                shares.append(d["hn_grad_share"])
            out[schedule][n] = sum(shares) / len(shares)
    return out


def feature_cache_path(clip, source, limit: int | None, dino, cache_dir: str | Path) -> Path:
    """Where the features of (model, dataset contents, limit, DINO model) are kept: the dataset is named by
    its manifest's bytes, so a re-planted dataset is encoded again and a moved one is not."""
    import hashlib

    manifest = Path(source) / "manifest.jsonl"
    digest = hashlib.sha1(manifest.read_bytes() if manifest.is_file() else str(Path(source).resolve()).encode())
    digest.update(f"{limit}|{getattr(dino, 'name', None)}".encode())
    return Path(cache_dir) / clip.hash / f"{Path(source).name}-{digest.hexdigest()[:16]}"


def concretebatch_features(clip, source, device: str = "cpu", batch_size: int = 64, limit: int | None = None,
                           dino=None, cache_dir: str | Path | None = None, progress: bool = True):
    """(image features, text features, concreteness, metadata, DINO similarities) of a ConcreteBatch under a
    model; features are ``[anchors; negatives]``. ``dino`` (a `DinoScorer`) adds image-image DINOScores.
    With ``cache_dir`` they are computed once per model and dataset and read back afterwards."""
    if cache_dir is None:
        return _encode_concretebatch(clip, source, device, batch_size, limit, dino, progress)
    import json

    from safetensors.torch import load_file

    from .records import atomic_write_safetensors, atomic_write_text

    path = feature_cache_path(clip, source, limit, dino, cache_dir)
    if (path / "metas.json").is_file():
        t = load_file(str(path / "features.safetensors"))
        return (t["image"], t["text"], t["concreteness"], json.loads((path / "metas.json").read_text()),
                t["dino"].tolist() if "dino" in t else [])
    image, text, c, metas, dino_scores = _encode_concretebatch(clip, source, device, batch_size, limit, dino, progress)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {"image": image, "text": text, "concreteness": c} | (
        {"dino": torch.tensor(dino_scores)} if dino_scores else {})
    atomic_write_safetensors(path / "features.safetensors", tensors)
    atomic_write_text(path / "metas.json", json.dumps(metas))  # written last: it marks the entry complete
    return image, text, c, metas, dino_scores


@torch.no_grad()
def _encode_concretebatch(clip, source, device: str, batch_size: int, limit: int | None, dino, progress: bool):
    from .concretebatch import iter_records

    dino_scores: list[float] = []
    anchors_i, negs_i, anchors_t, negs_t, cs, metas = [], [], [], [], [], []
    buffer: list[dict] = []

    def flush():
        if not buffer:
            return
        prep = lambda ims: torch.stack([clip.preprocess(im) for im in ims]).to(device)  # noqa: E731
        enc_i = lambda ims: F.normalize(clip.model.encode_image(prep(ims)).float(), dim=-1).cpu()  # noqa: E731
        enc_t = lambda ts: F.normalize(clip.model.encode_text(clip.tokenizer(ts).to(device)).float(), dim=-1).cpu()  # noqa: E731
        anchors_i.append(enc_i([r["image"] for r in buffer]))
        negs_i.append(enc_i([r["neg_image"] for r in buffer]))
        anchors_t.append(enc_t([r["caption"] for r in buffer]))
        negs_t.append(enc_t([r["neg_caption"] for r in buffer]))
        cs.extend(r["concreteness"] for r in buffer)
        metas.extend(r["meta"] | {"caption": r["caption"], "neg_caption": r["neg_caption"]} for r in buffer)
        if dino is not None:
            dino_scores.extend(dino.similarity([r["image"] for r in buffer], [r["neg_image"] for r in buffer]))
        buffer.clear()

    from tqdm import tqdm

    for n, record in enumerate(tqdm(iter_records(source), desc=f"encode {Path(source).name}", unit="pair",
                                    total=limit, leave=False, disable=not progress)):
        if limit is not None and n >= limit:
            break
        buffer.append(record)
        if len(buffer) == batch_size:
            flush()
    flush()
    if not cs:
        raise ValueError(f"{source} holds no records")
    return (torch.cat(anchors_i + negs_i), torch.cat(anchors_t + negs_t), torch.tensor(cs), metas, dino_scores)


def plot_gradient_share(curves: dict[str, dict[int, float]], path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for schedule, points in curves.items():
        ns = sorted(points)
        ax.plot(ns, [points[n] for n in ns], marker="o", label=LABELS.get(schedule, schedule))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size N (anchors)")
    ax.set_ylabel("hard-negative gradient share")
    ax.set_title("\n".join(textwrap.wrap(title or "Hard-negative share of the gradient (paper Fig. 6)", 60)),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


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


class DinoScorer:
    """DINOv2 image-image cosine (the paper's DINOScore) with any `transformers` DINOv2 (name or path)."""

    def __init__(self, model: str = "facebook/dinov2-base", device: str = "cpu"):
        from transformers import AutoImageProcessor, AutoModel

        self.name = f"dino:{model}"
        self.processor = AutoImageProcessor.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).to(device).eval()
        self.device = device

    @torch.no_grad()
    def similarity(self, a: list, b: list) -> list[float]:
        def embed(images):
            inputs = self.processor(images=images, return_tensors="pt").to(self.device)
            return F.normalize(self.model(**inputs).pooler_output.float(), dim=-1)

        return (embed(a) * embed(b)).sum(-1).cpu().tolist()


def bertscore_f1(candidates: list[str], references: list[str], model: str = "roberta-large",
                 num_layers: int | None = None, rescale: bool = True, device: str = "cpu") -> list[float]:
    """BERTScore F1 with the `bert-score` package (paper: RoBERTa-large with baseline rescaling)."""
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=model, num_layers=num_layers, lang="en" if rescale else None,
                        rescale_with_baseline=rescale, device=device)
    return scorer.score(candidates, references)[2].tolist()


def pair_rows(image: torch.Tensor, text: torch.Tensor, metas: list[dict], scale: float, dino: list[float],
              bertscore: list[float] | None) -> list[dict]:
    """One row per pair: the Table 1 quantities of docs/method.md §8 before averaging."""
    m = len(metas)
    v, v2, t, t2 = image[:m], image[m:], text[:m], text[m:]
    dot = lambda a, b: (a * b).sum(-1)  # noqa: E731
    rows = []
    for i, meta in enumerate(metas):
        row = {"id": meta["id"], "category": meta["category"], "keyword": meta["keyword"],
               "concreteness": float(meta["concreteness"]),
               "logit_gap": float(scale * (dot(v[i], t[i]) - dot(v[i], t2[i]))),
               "i2t": bool(dot(v[i], t[i]) > dot(v[i], t2[i])), "t2i": bool(dot(v[i], t[i]) > dot(v2[i], t[i])),
               "clip_l": float(dot(t[i], t2[i])), "clip_v": float(dot(v[i], v2[i])),
               "edit_distance": word_edit_distance(meta["caption"], meta["neg_caption"])}
        if dino:
            row["dino"] = dino[i]
        if bertscore is not None:
            row["bertscore"] = bertscore[i]
        rows.append(row)
    return rows


def summarize_rows(rows: list[dict]) -> dict:
    from .records import mean_median

    mean = lambda k: sum(float(r[k]) for r in rows) / len(rows)  # noqa: E731
    mean_c, median_c = mean_median([r["concreteness"] for r in rows])
    out = {"pairs": len(rows), "mean_c": mean_c, "median_c": median_c, "i2t": mean("i2t"), "t2i": mean("t2i"),
           "clip_l": mean("clip_l"), "clip_v": mean("clip_v"), "edit_distance": mean("edit_distance"),
           "unique_keywords": len({r["keyword"].lower() for r in rows})}
    for optional in ("dino", "bertscore"):
        if rows and optional in rows[0]:
            out[optional] = mean(optional)
    cats = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    out["category_shares"] = {k: v / len(rows) for k, v in sorted(cats.items())}
    return out


def binned_means(x: list[float], y: list[float], width: float = 0.25, min_count: int = 5) -> list[tuple]:
    """(bin centre, mean of y, half-width of its 95 % interval, count) for each concreteness bin holding at least
    ``min_count`` pairs; emptier bins are left out rather than drawn from two points."""
    bins: dict[int, list[float]] = {}
    for xi, yi in zip(x, y):
        bins.setdefault(int(xi // width), []).append(yi)
    out = []
    for k, values in sorted(bins.items()):
        n = len(values)
        if n < min_count:
            continue
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        out.append(((k + 0.5) * width, mean, 1.96 * sd / math.sqrt(n), n))
    return out


def supported_lowess(x: list[float], y: list[float], min_points: int = 20):
    """A LOWESS fit drawn only between the 5th and 95th percentile of x, where the data hold it up; ``None``
    for fewer than ``min_points`` pairs or no spread in x. Outside that range a smoother extrapolates from a
    handful of points, which is how a line can claim a gap where the only pairs have none."""
    from statsmodels.nonparametric.smoothers_lowess import lowess

    if len(x) < min_points:
        return None
    ordered = sorted(x)
    lo, hi = ordered[int(0.05 * (len(x) - 1))], ordered[int(0.95 * (len(x) - 1))]
    if hi <= lo:
        return None
    fit = lowess(y, x, frac=0.6, return_sorted=True)
    return fit[(fit[:, 0] >= lo) & (fit[:, 0] <= hi)]


def plot_dataset_figures(per_dataset: dict[str, list[dict]], out: Path) -> list[Path]:
    """Fig. 5: concreteness histograms, logit gap vs c (per dataset: points, binned means with 95 % intervals,
    LOWESS where supported), text shift vs c, visio-linguistic correlation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, rows in per_dataset.items():
        ax.hist([r["concreteness"] for r in rows], bins=20, range=(1, 5), alpha=0.5, label=name)
    ax.set_xlabel("concreteness c of the perturbed keyword")
    ax.set_ylabel("pairs")
    ax.set_title("Concreteness per dataset (Fig. 5a)")
    ax.legend()
    save(fig, "fig5a_concreteness.png")

    names = list(per_dataset)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), dpi=120, squeeze=False, sharey=True)
    for ax, name, colour in zip(axes[0], names, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        rows = per_dataset[name]
        x, y = [r["concreteness"] for r in rows], [r["logit_gap"] for r in rows]
        ax.scatter(x, y, s=5, alpha=0.15, color=colour, linewidths=0)
        bins = binned_means(x, y)
        if bins:
            ax.errorbar([b[0] for b in bins], [b[1] for b in bins], yerr=[b[2] for b in bins], fmt="o", ms=4,
                        color="black", capsize=2, label="mean per 0.25 of c (95 % CI, bins of >= 5 pairs)")
        fit = supported_lowess(x, y)
        if fit is not None and len(fit):
            ax.plot(fit[:, 0], fit[:, 1], color=colour, linewidth=2, label="LOWESS (5th-95th percentile of c)")
        ax.set_title(f"{name} ({len(rows)} pairs)", fontsize=10)
        ax.set_xlabel("concreteness c")
        ax.set_xlim(0.9, 5.1)
        ax.set_xticks([1, 2, 3, 4, 5])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("logit gap S[i,i] - S[i,i']")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("Logit gap against concreteness (Fig. 5b-c)", fontsize=11)
    save(fig, "fig5bc_logit_gap.png")

    has_bert = all(rows and "bertscore" in rows[0] for rows in per_dataset.values())
    fig, axes = plt.subplots(1, 2 if has_bert else 1, figsize=(11 if has_bert else 6, 4), dpi=120, squeeze=False)
    for name, rows in per_dataset.items():
        x = [r["concreteness"] for r in rows]
        axes[0][0].scatter(x, [r["edit_distance"] for r in rows], s=6, alpha=0.4, label=name)
        if has_bert:
            axes[0][1].scatter(x, [r["bertscore"] for r in rows], s=6, alpha=0.4, label=name)
    axes[0][0].set(xlabel="concreteness c", ylabel="word edit distance (t, t')", title="Edit distance (Fig. 5d)")
    if has_bert:
        axes[0][1].set(xlabel="concreteness c", ylabel="BERTScore F1 (t, t')", title="BERTScore (Fig. 5d)")
    axes[0][0].legend()
    save(fig, "fig5d_text_shift.png")

    visual = "dino" if all(rows and "dino" in rows[0] for rows in per_dataset.values()) else "clip_v"
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, rows in per_dataset.items():
        ax.scatter([r["clip_l"] for r in rows], [r[visual] for r in rows], s=6, alpha=0.4, label=name)
    ax.set_xlabel("CLIP-L text-text cosine (t, t')")
    ax.set_ylabel({"dino": "DINOScore (v, v')", "clip_v": "CLIP-V image-image cosine (v, v')"}[visual])
    ax.set_title("Visio-linguistic correlation (Fig. 5e-f)")
    ax.legend()
    save(fig, "fig5ef_correlation.png")
    return paths


def analyze_datasets(datasets: list[str | Path], clip, out: str | Path, device: str = "cpu",
                     dino_model: str | None = None, bertscore_model: str | None = None,
                     bertscore_layers: int | None = None, bertscore_rescale: bool = True,
                     limit: int | None = None, cache_dir: str | Path | None = None, progress: bool = True) -> dict:
    """Table 1 statistics, Fig. 5 and per-pair scores for each dataset; writes stats.json and report.md.
    Embeddings are cached in ``cache_dir`` (default ``<out>/embeddings``) by model and dataset."""
    from .records import atomic_write_json, atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dino = DinoScorer(dino_model, device=device) if dino_model else None
    scale = clip.model.logit_scale.exp().item()
    per_dataset, summaries, modes = {}, {}, {}
    for d in datasets:
        name = Path(d).name
        image, text, _, metas, dino_scores = concretebatch_features(clip, d, device=device, limit=limit, dino=dino,
                                                                    cache_dir=cache_dir or out / "embeddings",
                                                                    progress=progress)
        bert = (bertscore_f1([m["neg_caption"] for m in metas], [m["caption"] for m in metas], bertscore_model,
                             bertscore_layers, bertscore_rescale, device) if bertscore_model else None)
        per_dataset[name] = pair_rows(image, text, metas, scale, dino_scores, bert)
        summaries[name] = summarize_rows(per_dataset[name])
        modes[name] = metas[0].get("mode")
    scorers = {"reference_clip": clip.identity, "dino": dino.name if dino else None,
               "bertscore": {"model": bertscore_model, "layers": bertscore_layers, "rescaled": bertscore_rescale}
               if bertscore_model else None}
    stats = {"scorers": scorers, "datasets": {n: {"mode": modes[n], "summary": summaries[n]} for n in summaries},
             "pairs": {n: {r["id"]: {k: v for k, v in r.items() if k not in ("id", "category", "keyword")}
                           for r in rows} for n, rows in per_dataset.items()}}
    atomic_write_json(out / "stats.json", stats)
    figures = plot_dataset_figures(per_dataset, out)
    atomic_write_text(out / "report.md", report_markdown(summaries, modes, scorers, figures))
    return stats


TABLE1_METRICS = [("mean_c", "Mean c"), ("median_c", "Median c"), ("i2t", "I2T acc."), ("t2i", "T2I acc."),
                  ("bertscore", "BERTScore"), ("clip_l", "CLIP-L"), ("dino", "DINOScore"), ("clip_v", "CLIP-V"),
                  ("unique_keywords", "# Unique"), ("edit_distance", "Word edit distance")]


def table1_markdown(summaries: dict[str, dict], modes: dict[str, str | None]) -> str:
    """Each dataset's statistics beside the paper's Table 1 value for its mode, and the category shares."""
    names = list(summaries)
    lines = ["| metric | " + " | ".join(f"{n} | paper D_{modes[n]}" for n in names) + " |",
             "| --- |" + " --- | --- |" * len(names)]
    fmt = lambda v: "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))  # noqa: E731
    for key, label in TABLE1_METRICS:
        cells = []
        for n in names:
            cells += [fmt(summaries[n].get(key)), fmt(PAPER_TABLE1.get(modes[n] or "", {}).get(key))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Category shares: " + "; ".join(f"{n}: " + ", ".join(f"{k} {v:.0%}" for k, v in
                                                                        summaries[n]["category_shares"].items())
                                                 for n in names)]
    return "\n".join(lines)


def describe_model(identity: dict) -> str:
    """A model's identity in words: ``ViT-B-32 (openai)``, ``cj-tiny (random init, seed 0)``, ``checkpoint 1a2b…``."""
    if "checkpoint" in identity:
        return f"our checkpoint (weights sha1 {identity['checkpoint'][:12]})"
    if identity.get("pretrained", "none") == "none":
        return f"{identity.get('name')} (random init, seed {identity.get('seed', 0)})"
    return f"{identity.get('name')} ({identity.get('pretrained')})"


def describe_scorers(scorers: dict) -> str:
    dino = scorers["dino"].removeprefix("dino:") if scorers["dino"] else "not computed (pass --dino-model)"
    bert = scorers["bertscore"]
    bert = (f"{bert['model']}" + (f", layer {bert['layers']}" if bert["layers"] else "") +
            (", baseline-rescaled" if bert["rescaled"] else ", not rescaled")) if bert else \
        "not computed (pass --bertscore-model)"
    return f"Reference CLIP: {describe_model(scorers['reference_clip'])}. DINOv2: {dino}. BERTScore: {bert}."


def report_markdown(summaries: dict[str, dict], modes: dict[str, str | None], scorers: dict, figures) -> str:
    lines = ["# Dataset analysis (paper Table 1, Fig. 5)", "",
             describe_scorers(scorers) + " A dash: no scorer given, or no paper value.", "",
             table1_markdown(summaries, modes), ""]
    lines += [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    return "\n".join(lines) + "\n"
