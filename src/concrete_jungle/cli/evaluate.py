"""`concrete-jungle eval`: evaluate a model on the benchmarks, check their data, or compare result files."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from .args import add_model_args, check_model_args, load_model_from_args, non_negative_int, positive_int
from .tables import print_markdown


EVAL_LAYOUT = """data root layout (only the benchmarks asked for are read):
  sugarcrepe/*.json                 official SugarCrepe JSON, images in coco/val2017/
  sugarcrepe_pp/*.json              official SugarCrepe++ JSON, images in coco/val2017/
  winoground/examples.jsonl         + winoground/images/<image>.png
  aro/visual_genome_{relation,attribution}.json + aro/images/ (+ aro/vg_relation_symmetric.txt)
  valse/<piece>.json                + valse/images/<image_file>
  whatsup/controlled_{images,clevr}_dataset.json + whatsup/controlled_{images,clevr}/;
  whatsup/{coco,vg}_qa_{one,two}_obj.json + coco/val2017/, whatsup/vg_images/
  flickr30k/dataset_flickr30k.json  + flickr30k/images/ (retrieval: the Karpathy test split)
  coco/dataset_coco.json            + coco/val2014/ (coco_retrieval: the Karpathy 5k test split)
                                    (aro_order: COCO-Order and Flickr30k-Order from the two Karpathy files)
  zeroshot/<dataset>/test/<class>/  zeroshot (+ classnames.txt, templates.txt; else clip_benchmark's)
  imagenet/{train,val}/<class>/     linear_probe (ImageFolder)
  coco/annotations/instances_{train,val}2017.json + coco/{train,val}2017/   coco_probe
  vtab/<task>/{train,test}/<class>/ or a clip_benchmark dataset root per task
where to get each: docs/data.md"""


def add_parser(sub) -> None:
    from ..evaluation.names import BENCHMARKS

    p = sub.add_parser(
        "eval",
        help="evaluate a model: SugarCrepe, SugarCrepe++, Winoground, ARO, VALSE, What'sUp, retrieval, probes, VTAB",
        description="Evaluate an open_clip model or a checkpoint on the benchmarks under --data-root. Writes one "
        "JSON per benchmark and results.md to --out. --check only checks the data (no model).",
        epilog=EVAL_LAYOUT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--benchmarks", default="sugarcrepe",
                   help=f"comma-separated, from {', '.join(BENCHMARKS)}; or all: every benchmark whose data is under "
                   "--data-root (it says which it found and which not) (default %(default)s)")
    p.add_argument("--data-root", help="folder holding the benchmarks' data (layout below)")
    p.add_argument("--check", action="store_true",
                   help="check the data root's layout, every item of its benchmark files and every image; print the "
                   "item counts and the digest of each benchmark's files; loads no model")
    p.add_argument("--out", default="results", help="output folder (default %(default)s); one model's: results "
                   "of another model there are refused, its own are kept and reported with the new ones")
    p.add_argument("--overwrite", action="store_true",
                   help="remove the results of another model from --out first")
    p.add_argument("--skip-missing", action="store_true", help="skip items whose images are missing or unreadable")
    p.add_argument("--batch-size", type=positive_int, default=64, help="images or texts per forward pass")
    p.add_argument("--workers", type=non_negative_int, default=0, help="image-loading processes")
    p.add_argument("--cache-dir", help="cache embeddings here (by model hash and file)")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="compare result files of one benchmark and exit: each file against the first, with the "
                   "difference's 95 %% interval (paired bootstrap over images) and McNemar's p; results computed on "
                   "other benchmark files (another benchmark_files_sha256) are refused")
    p.add_argument("--vs", nargs="+", metavar="JSON",
                   help="with --compare A1.json A2.json ...: the runs to compare them with (e.g. the seeds of another "
                   "model); the runs are resampled within each side too")
    p.add_argument("--resamples", type=positive_int, default=2000,
                   help="bootstrap resamples of --compare (default %(default)s)")
    p.add_argument("--compare-json", metavar="FILE", help="also write the comparison as JSON here, and its table as "
                   "Markdown beside it (FILE with the suffix .md)")
    p.add_argument("--no-trim-text", action="store_true",
                   help="encode every caption at the full context (77 tokens) instead of the batch's longest caption; "
                   "the features are the same either way (docs/method.md §7)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p)
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from .. import evaluation
    from ..evaluation.report import compare, compare_markdown, layout_report, markdown

    if args.vs and not args.compare:
        raise ValueError("--vs needs --compare: concrete-jungle eval --compare A1.json A2.json --vs B1.json B2.json")
    if args.compare:
        if len(args.compare) + len(args.vs or []) < 2:
            raise ValueError(f"--compare needs two or more result files, it got one ({args.compare[0]}): "
                             "concrete-jungle eval --compare A.json B.json [C.json ...], or --compare A.json "
                             "--vs B.json")
        if args.compare_json and Path(args.compare_json).suffix == ".md":
            raise ValueError(f"--compare-json {args.compare_json}: give the JSON a name ending in .json; its table is "
                             "written beside it with the suffix .md")
        comparison = compare(args.compare, args.vs, resamples=args.resamples)
        table = compare_markdown(comparison)
        print_markdown(console, table)
        if args.compare_json:
            from ..records import atomic_write_json, atomic_write_text

            atomic_write_json(args.compare_json, comparison)
            atomic_write_text(Path(args.compare_json).with_suffix(".md"), table)
        return 0
    if not args.data_root:
        raise ValueError("concrete-jungle eval needs --data-root (or --compare A.json B.json)")
    root = Path(args.data_root)
    if not root.is_dir():
        raise ValueError(f"--data-root {root} does not exist; it is the folder holding sugarcrepe/, coco/, ... "
                         "(see concrete-jungle eval --help and docs/data.md)")
    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    if names == ["all"]:
        names = benchmarks_present(root, console)
    unknown = sorted(set(names) - set(evaluation.BENCHMARKS))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(evaluation.BENCHMARKS)}, or all "
                         "(alone: every benchmark whose data is under --data-root)")
    if not args.check:
        check_model_args(args)
    # every benchmark's files are checked before the model is loaded
    loaded = {n: evaluation.load_data(n, root, args.skip_missing) for n in names}
    if args.check:
        print_markdown(console, layout_report(loaded))
        return 0
    from ..evaluation.encoding import Encoder

    clip, device = load_model_from_args(args)
    encoder = Encoder(clip, device=device, batch_size=args.batch_size, num_workers=args.workers,
                      trim_text=not args.no_trim_text,
                      cache_dir=args.cache_dir, progress=not args.no_progress)
    from ..locks import locked

    with locked(Path(args.out) / ".eval.lock", f"--out {args.out}", "concrete-jungle eval"):
        results = evaluation.run(encoder, names, loaded, out=args.out, overwrite=args.overwrite)
    print_markdown(console, markdown(results))
    console.print(f"written: {Path(args.out) / 'results.md'} and one JSON per benchmark in {args.out}", highlight=False)
    return 0


def benchmarks_present(root: Path, console: Console) -> list[str]:
    """``--benchmarks all``: the benchmarks whose data is under ``root``, said with those that are not there."""
    from ..evaluation import MARKERS, present

    found = present(root)
    names = [n for n, there in found.items() if there]
    expected = {n: " or ".join(MARKERS[n]) for n in found}
    if not names:
        raise ValueError(f"--benchmarks all: no benchmark's data is under --data-root {root} (none of "
                         f"{'; '.join(expected.values())} is there); see the layout in concrete-jungle eval --help "
                         "and docs/data.md")
    absent = [f"{n} (no {expected[n]})" for n, there in found.items() if not there]
    console.print(f"--benchmarks all: found under {root}: {', '.join(names)}; not found: "
                  f"{', '.join(absent) or 'none'}", highlight=False)
    return names
