"""`concrete-jungle export`: a ConcreteBatch as Parquet files to share (the Hugging Face Hub's form)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a ConcreteBatch as Parquet (images as bytes, the captions, the metadata) to share or load "
        "with datasets",
        description="One Parquet file per shard, with the Hugging Face feature description: "
        "datasets.load_dataset('parquet', data_files='OUT/...parquet') reads the pictures as images. Every record "
        "is a row: its first negative in neg_image (null for a caption without a picture), neg_caption and "
        "concreteness, its further negatives in more_negatives (caption, image or null, concreteness). --to hf "
        "writes OUT/data/ and a dataset card (README.md), the layout `huggingface-cli upload` and "
        "load_dataset(OUT) expect. Into a folder holding an export of the same dataset it writes only what is "
        "missing; a folder holding anything else is refused, naming it (a hand-written README.md is never replaced).",
    )
    p.add_argument("dataset", metavar="DIR", help="a ConcreteBatch directory")
    p.add_argument("--to", choices=["parquet", "hf"], default="parquet", help="the layout (default %(default)s)")
    p.add_argument("out", metavar="OUT", help="output folder")
    p.add_argument("--partial", action="store_true",
                   help="export the finished shards of an unfinished or unmerged dataset (refused otherwise)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the export of another dataset that OUT holds (the new one takes its place once "
                   "complete); files this command did not write are never replaced")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..concretebatch import shard_urls
    from ..concretebatch.export import export
    from ..files.locks import locked

    shard_urls(args.dataset, args.partial)  # a ConcreteBatch directory, or one clear line
    with locked(Path(args.out) / ".export.lock", f"--out {args.out}", "concrete-jungle export"):
        files = export(args.dataset, args.out, args.to, args.partial, progress=not args.no_progress,
                       overwrite=args.overwrite)
    where = files[0].parent if files else args.out
    console.print(f"exported {args.dataset} to {len(files)} Parquet file(s) in {where}", highlight=False)
    return 0
