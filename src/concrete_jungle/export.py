"""A ConcreteBatch as Parquet, the form the Hugging Face Hub shares datasets in: one row per record with both
pictures as bytes (the JPEGs of the shards, unchanged), both captions and the metadata columns.

One Parquet file per shard (``train-00000-of-00004.parquet``), whose schema carries the Hugging Face feature
description, so ``datasets.load_dataset("parquet", data_files=...)`` (or ``load_dataset(OUT)`` for ``--to hf``)
gives the pictures as images. Each file is written under a temporary name and renamed; a file already complete is
kept, so a stopped export resumes.
"""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = ("id", "image", "caption", "neg_image", "neg_caption", "concreteness", "keyword", "category", "mode",
           "meta")
FEATURES = {c: {"_type": "Image"} if c in ("image", "neg_image") else
            {"dtype": "float64" if c == "concreteness" else "string", "_type": "Value"} for c in COLUMNS}


def schema():
    import pyarrow as pa

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    types = {"image": image, "neg_image": image, "concreteness": pa.float64()}
    fields = [pa.field(c, types.get(c, pa.string())) for c in COLUMNS]
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": FEATURES}})})


def export(root: str | Path, out: str | Path, to: str = "parquet", partial: bool = False,
           progress: bool = True) -> list[Path]:
    """Write every record of the ConcreteBatch ``root`` under ``out`` (``to="hf"``: ``out/data/`` and a dataset
    card); the files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from .concretebatch import index_shards, read_member, shard_urls

    urls = shard_urls(root, partial)  # damaged, unfinished or unmerged: refused, as every reader does
    folder = Path(out) / "data" if to == "hf" else Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for n, url in enumerate(tqdm(urls, desc="export", unit="shard", disable=not progress)):
        target = folder / f"train-{n:05d}-of-{len(urls):05d}.parquet"
        written.append(target)
        if target.is_file():
            continue
        rows = {c: [] for c in COLUMNS}
        for record in index_shards([url]):
            meta = json.loads(read_member(record["json"]))
            rows["id"].append(str(meta.get("id")))
            rows["image"].append({"bytes": read_member(record["jpg"]), "path": None})
            rows["caption"].append(read_member(record["txt"]).decode("utf-8"))
            rows["neg_image"].append({"bytes": read_member(record["neg.jpg"]), "path": None})
            rows["neg_caption"].append(read_member(record["neg.txt"]).decode("utf-8"))
            rows["concreteness"].append(float(meta["concreteness"]))
            for key in ("keyword", "category", "mode"):
                rows[key].append(None if meta.get(key) is None else str(meta[key]))
            rows["meta"].append(json.dumps(meta, ensure_ascii=False, sort_keys=True))
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(pa.table(rows, schema=schema()), tmp)
        tmp.rename(target)
    if to == "hf":
        (Path(out) / "README.md").write_text(dataset_card(Path(root), len(urls)))
    return written


def dataset_card(root: Path, files: int) -> str:
    summary = root / "summary.json"
    counts = json.loads(summary.read_text()) if summary.is_file() else {}
    return "\n".join([
        "---", "configs:", "- config_name: default", "  data_files:", "  - split: train", "    path: data/train-*",
        "---", "", f"# {root.name}: a ConcreteBatch", "",
        "Hard-negative pairs made by concrete-jungle's ConcretePlant: each row holds an image and its caption, and "
        "a negative image and caption that change one concrete keyword.", "",
        f"{files} Parquet file(s); records: {counts.get('ok', 'see the files')}.", "",
        "Columns: " + ", ".join(f"`{c}`" for c in COLUMNS) + " (`meta`: the record's full metadata as JSON).", "",
        "```python", "from datasets import load_dataset", "ds = load_dataset(\"parquet\", "
        "data_files=\"data/train-*.parquet\")[\"train\"]", "```", ""])
