"""`concrete-jungle cache`: preprocess ConcreteBatch images (or a store of plain pairs) once for a model (the
training image cache)."""

from __future__ import annotations

from rich.console import Console

from .args import add_model_args, check_model_args, load_model_from_args, non_negative_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="preprocess ConcreteBatch datasets once for a model, so training reads pixels instead of decoding JPEGs",
        description="Apply the model's resize and crop to every anchor and negative picture once and store them as "
        "uint8 (and the captions as tokens) in <dataset>/cache/<key>/. A folder of WebDataset shards, Parquet files "
        "or a saved dataset (plain pairs for data.pairs) is cached the same way. `train` uses the caches when every "
        "input of its data has a current one: no JPEG decoding during training. Takes about 2 x 3 x H x W bytes a "
        "record (ViT-B-32: 0.3 MB).",
    )
    p.add_argument("datasets", nargs="+", metavar="DATASET",
                   help="ConcreteBatch directories, or folders of stores (plain pairs)")
    p.add_argument("--workers", type=non_negative_int, help="decoding processes (default: 4, at most the CPUs this "
                   "process may use)")
    p.add_argument("--partial", action="store_true",
                   help="cache the finished shards of an unfinished or unmerged dataset (refused otherwise)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p)
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from pathlib import Path

    from ..concretebatch import shard_urls
    from ..train.image_cache import is_pairs_store

    for d in args.datasets:
        if not is_pairs_store(Path(d)):
            shard_urls(d, args.partial)
    check_model_args(args)
    from ..train.image_cache import build_cache
    from ..train.workers import capped_workers, default_workers

    workers = default_workers() if args.workers is None else capped_workers(args.workers, "--workers")
    clip, _ = load_model_from_args(args)
    for d in args.datasets:
        folder = build_cache(d, clip, workers=workers, progress=not args.no_progress, partial=args.partial)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        console.print(f"{d}: cache {folder} ({size:.0f} MiB)", highlight=False)
    return 0
