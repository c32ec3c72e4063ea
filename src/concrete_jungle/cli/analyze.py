"""`concrete-jungle analyze`: dataset statistics (Table 1, Fig. 5) and the gradient share (Fig. 6)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .args import (
    add_model_args,
    check_model_args,
    load_model_from_args,
    positive_float,
    positive_int,
    positive_int_list,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="the paper's analyses: dataset statistics (Table 1, Fig. 5) and gradient share (Fig. 6)",
        description="`analyze datasets DATASET [DATASET ...]` (or just `analyze DATASET ...`): Table 1 statistics, "
        "Fig. 5 plots, stats.json and report.md. `analyze gradient-share --data DATASET`: the hard-negative "
        "gradient share of InfoNCE and each margin schedule against batch size (Fig. 6).",
    )
    tasks = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    d = tasks.add_parser("datasets", help="Table 1 statistics and Fig. 5 plots of ConcreteBatch datasets",
                         description="Table 1 statistics (concreteness, I2T/T2I under a reference CLIP, "
                         "CLIP-L, CLIP-V, DINOScore, BERTScore, edit distance), Fig. 5 plots, stats.json, report.md. "
                         "Each record counts with its first negative; a negative without a picture (a caption, as "
                         "imported sets hold them) is left out of T2I, CLIP-V and DINOScore (null), and counted.")
    d.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    d.add_argument("--dino-model", help="DINOv2 for DINOScore (name or path, e.g. facebook/dinov2-base)")
    d.add_argument("--bertscore-model", help="BERTScore model (paper: roberta-large)")
    d.add_argument("--bertscore-layers", type=positive_int,
                   help="BERTScore layer (needed for models bert-score does not know)")
    d.add_argument("--no-rescale", action="store_true", help="BERTScore without baseline rescaling")
    g = tasks.add_parser("gradient-share", help="hard-negative gradient share against batch size (Fig. 6)",
                         description="The hard-negative gradient share (mean p_{a,h(a)} / (1 - p_aa), both "
                         "directions) of InfoNCE and the static, adaptive and inverse margins, averaged over random "
                         "batches of N anchors of a model's features on a ConcreteBatch.")
    g.add_argument("--data", required=True, help="a ConcreteBatch directory")
    g.add_argument("--batch-sizes", type=positive_int_list, default=(64, 128, 256, 512, 1024),
                   help="anchors per batch, comma-separated (default 64,128,256,512,1024)")
    g.add_argument("--batches", type=positive_int, default=8, help="random batches averaged per size")
    g.add_argument("--logit-scale", type=positive_float, help="default: the model's own")
    for q in (d, g):
        q.add_argument("--limit", type=positive_int, help="use at most this many pairs")
        q.add_argument("--partial", action="store_true",
                       help="use the finished shards of an unfinished or unmerged dataset (refused otherwise)")
        q.add_argument("--out", default="report", help="output folder (default %(default)s)")
        q.add_argument("--cache-dir", help="embeddings cache, by model and dataset (default <out>/embeddings)")
        q.add_argument("--no-trim-text", action="store_true",
                       help="encode every caption at the full context (77 tokens) instead of the batch's longest "
                       "caption; the features are the same either way up to float rounding (docs/method.md §7)")
        add_model_args(q)
        q.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..concretebatch import shard_urls
    from ..files.locks import locked

    for d in args.datasets if args.analysis == "datasets" else [args.data]:
        shard_urls(d, args.partial)  # a finished ConcreteBatch, or a clear error before the model loads
    check_model_args(args)
    with locked(Path(args.out) / ".analyze.lock", f"--out {args.out}", "concrete-jungle analyze"):
        return analyze(args, console)


def analyze(args, console: Console) -> int:
    if args.analysis == "datasets":
        from ..analysis.dataset_statistics import analyze_datasets

        clip, device = load_model_from_args(args)
        stats = analyze_datasets(args.datasets, clip, args.out, device=device, dino_model=args.dino_model,
                                 bertscore_model=args.bertscore_model, bertscore_layers=args.bertscore_layers,
                                 bertscore_rescale=not args.no_rescale, limit=args.limit, cache_dir=args.cache_dir,
                                 partial=args.partial, trim_text=not args.no_trim_text)
        from ..analysis.dataset_statistics import dataset_notes
        from ..analysis.entailed import entailed_sentence

        for note in dataset_notes({n: d["summary"] for n, d in stats["datasets"].items()}):
            console.print(f"note: {note}", highlight=False)
        for name, d in stats["datasets"].items():
            console.print(entailed_sentence(name, d["entailment"]["all"]), highlight=False)
        console.print(f"{len(stats['datasets'])} datasets analysed: {Path(args.out) / 'report.md'}, stats.json, "
                      "figures")
        return 0
    from rich.table import Table

    from ..analysis.dataset_statistics import concretebatch_features, gradient_share_samples, means, model_label, spread
    from ..analysis.figures import LABELS, gradient_share_title, plot_gradient_share
    from ..records import atomic_write_json

    sizes = list(args.batch_sizes)
    clip, device = load_model_from_args(args)
    image, text, c, metas, _ = concretebatch_features(clip, args.data, device=device, limit=args.limit,
                                                      cache_dir=args.cache_dir or Path(args.out) / "embeddings",
                                                      partial=args.partial, trim_text=not args.no_trim_text)
    scale = args.logit_scale or clip.model.logit_scale.exp().item()
    # the first negative of each record (as every statistic reads it); one without a picture is masked
    import torch

    has_picture = torch.tensor([m.get("neg_has_picture", True) for m in metas])
    samples = gradient_share_samples(image, text, c, scale, sizes, batches=args.batches,
                                     has_negative_image=has_picture)
    curves = means(samples)
    sd = spread(samples)
    out = Path(args.out)
    atomic_write_json(out / "gradient_share.json", {"model": clip.identity, "data": args.data, "logit_scale": scale,
                                                    "pairs": len(c), "batches": args.batches, "curves": curves,
                                                    "sd": sd, "negatives_without_picture": int((~has_picture).sum())})
    plot_gradient_share(curves, out / "gradient_share.png", gradient_share_title(
        Path(args.data).name, len(c), model_label(clip.identity), scale), sd, args.batches)
    table = Table(title=f"hard-negative gradient share on {Path(args.data).name} under {clip.label} ({len(c)} pairs, "
                  f"logit scale {scale:.1f}; mean ± sd over {args.batches} random batches)")
    table.add_column("N", justify="right")
    for schedule in curves:
        table.add_column(LABELS[schedule], justify="right")
    for n in sizes:
        table.add_row(str(n), *(f"{curves[s][n]:.3f} ± {sd[s][n]:.3f}" for s in curves))
    from ..records import atomic_write_text
    from .tables import print_table, table_markdown

    print_table(console, table)
    if not has_picture.all():
        console.print(f"note: {int((~has_picture).sum())} of {len(c)} negatives have no picture (captions only): "
                      "the text-to-image direction leaves them out", highlight=False)
    atomic_write_text(out / "gradient_share.md", table_markdown(table))  # the table beside its JSON
    console.print(f"written: {out / 'gradient_share.json'}, {out / 'gradient_share.md'}, {out / 'gradient_share.png'}")
    return 0
