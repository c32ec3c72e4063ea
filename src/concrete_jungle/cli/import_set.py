"""`concrete-jungle import`: a peer's training set, read as released, written as a ConcreteBatch."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .args import positive_int


def add_parser(sub) -> None:
    from ..sources import FORMATS as CAPTION_FORMATS
    from ..sources.peers import FORMATS

    p = sub.add_parser(
        "import",
        help="write a peer's training set (NegCLIP, TripletCLIP, VisMin, CE-CLIP, COCO rule swaps, CLIC's pairs) as a "
        "ConcreteBatch",
        description="Read a peer's released training set as it is and write it as a ConcreteBatch that train, "
        "cache, analyze, gallery and export take like a planted one: every field the format carries is kept in "
        "the record's json with the file and line it came from; a record that cannot be read is a reject with its "
        "reason. A negative the format does not rate is rated from the words it changed (docs/method.md §4). "
        "Re-running with the same --out resumes. Formats and where each is released: docs/peers.md.",
    )
    p.add_argument("format", metavar="FORMAT", choices=list(FORMATS), help=f"one of: {', '.join(FORMATS)}")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="the released files or folders: negclip: train_neg_clip.tsv; tripletclip: the shards "
                   "(shards/shard-{0..750}.tar); vismin: train.json; ce-clip: generated_data/coco_train/ (the .npy "
                   "files); coco-swaps and clic: caption files (COCO captions_*.json, Karpathy, JSONL, CSV) or stores")
    p.add_argument("--images", help="the folder the records' image paths are relative to (negclip: the folder "
                   "holding coco/; vismin: VisMin's data folder; ce-clip: the folder holding train2014/; "
                   "coco-swaps and clic: the image folder); tripletclip holds its pictures")
    p.add_argument("--out", required=True, help="dataset directory; an existing import is resumed")
    p.add_argument("--samples-per-shard", type=positive_int, default=1000,
                   help="records per WebDataset tar shard (default %(default)s)")
    p.add_argument("--scale", default="brysbaert", help="concreteness scale for the changed words' ratings "
                   "(brysbaert or lancaster-visual; default %(default)s)")
    p.add_argument("--spacy-model", help="spaCy pipeline name or path (default: an installed English pipeline)")
    p.add_argument("--limit", type=positive_int, help="only the first N records: try an import on a few")
    g = p.add_argument_group("negclip")
    g.add_argument("--hard-images", action="store_true",
                   help="add each row's hard images (its neg_image rows: their image and caption) as negatives")
    g = p.add_argument_group("coco-swaps and clic (--seed also pairs clic's pictures; --swaps is coco-swaps')")
    g.add_argument("--swaps", type=positive_int, default=1, help="rule-swap negatives per caption (default 1)")
    g.add_argument("--seed", type=int, default=0, help="seed of the swaps' choices (default %(default)s)")
    g.add_argument("--max-attempts", type=positive_int, default=3, help="rewrites tried per keyword (default 3)")
    g.add_argument("--split", help="Karpathy split(s) to read, e.g. train or train,restval (default: all)")
    g.add_argument("--caption-format", choices=CAPTION_FORMATS, help="the captions' format (default: detected)")
    g.add_argument("--positives", type=positive_int, default=1,
                   help="captions of a picture kept as its positives, in one record (COCO has 5; default 1: each "
                   "caption a record of its own)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from rich.table import Table

    from ..plant.imported import ImportConfig, run_import
    from .plant import readable, write_table
    from .tables import print_table

    config = ImportConfig(
        format=args.format, inputs=list(args.inputs), out=args.out, images=args.images,
        samples_per_shard=args.samples_per_shard, scale=args.scale, spacy_model=args.spacy_model, limit=args.limit,
        hard_images=args.hard_images, swaps=args.swaps, seed=args.seed, max_attempts=args.max_attempts,
        split=args.split, caption_format=args.caption_format, positives=args.positives)
    config.check_inputs()  # files, folders, the first images: before anything is written or loaded
    summary = run_import(config, progress=not args.no_progress)
    table = Table(title=f"ConcreteBatch imported from {args.format}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key.replace("_", " "), readable(value))
    print_table(console, table)  # whole rows through a pipe
    write_table(table, Path(args.out) / "summary.md")
    console.print(f"written: {args.out} (shards, manifest.jsonl, rejects.jsonl, summary.json, summary.md)",
                  highlight=False)
    return 0
