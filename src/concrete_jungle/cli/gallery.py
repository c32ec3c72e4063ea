"""`concrete-jungle gallery`: a static HTML page of hard negatives."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .args import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gallery",
        help="write a static HTML page of hard negatives (the anchor and its negatives side by side)",
        description="One row per sampled anchor, one card per dataset (give D_hc D_lc D_wo of the same anchors "
        "to compare them), showing every negative of the record; a negative without a picture (a caption, as "
        "imported sets hold them) is shown as its caption beside a 'no picture' box. Opens from disk.",
    )
    p.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    p.add_argument("--out", default="gallery", help="output folder (default %(default)s)")
    p.add_argument("--sample", type=positive_int, default=200, help="anchors on the page (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the anchor sample (default %(default)s)")
    p.add_argument("--sort", default="concreteness", choices=["concreteness", "category", "random"],
                   help="row order: most concrete first, by category, or random (default %(default)s)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="keep anchors whose record matches, e.g. category=relation or mode=hc (repeatable)")
    p.add_argument("--stats", help="an analysis stats.json with per-pair scores: {dataset: {id: {name: value}}}")
    p.add_argument("--partial", action="store_true",
                   help="show the finished shards of a dataset still being planted, or of an unmerged split run")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the gallery page --out holds (a folder holding other files is refused all the same)")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..analysis.gallery import build_gallery

    filters = {}
    for item in args.filter:
        if "=" not in item:
            raise ValueError(f"--filter {item!r} must look like category=relation")
        key, value = item.split("=", 1)
        filters[key] = value
    from ..concretebatch import shard_urls
    from ..files.locks import locked

    for d in args.datasets:
        # a ConcreteBatch directory, or a clear error before the output folder is made
        shard_urls(d, partial=args.partial)
    with locked(Path(args.out) / ".gallery.lock", f"--out {args.out}", "concrete-jungle gallery"):
        page = build_gallery(args.datasets, args.out, sample=args.sample, seed=args.seed, sort=args.sort,
                             filters=filters, stats=args.stats, overwrite=args.overwrite,
                             partial=args.partial)
    console.print(f"gallery written: {page}")
    return 0
