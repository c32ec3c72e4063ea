"""`concrete-jungle export` into a folder that already holds something: an export of the same dataset is resumed (or
left as it is), anything else is refused before a file is written, naming it, and kept; an export of another
dataset is replaced whole, and only once the new one is complete, with --overwrite."""

import json
import resource
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records
from test_gallery import K_RECORDS, make_concretebatch, make_k_negative_batch


def export(dataset, out, *extra):
    return main(["export", str(dataset), str(out), "--no-progress", *map(str, extra)])


def rows(folder):
    """(id, caption, negative caption, category) of every row of the Parquet files under ``folder``."""
    return sorted((r["id"], r["caption"], r["neg_caption"], r["category"]) for path in sorted(folder.rglob("*.parquet"))
                  for r in pq.read_table(path).to_pylist())


def records(dataset):
    return sorted((str(r["meta"]["id"]), r["caption"], r["neg_caption"], r["meta"]["category"])
                  for r in iter_records(dataset))


def tree(folder):
    """The files under ``folder`` and their bytes; hidden ones (a lock, the staging folder) left out."""
    return {rel: p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not (rel := p.relative_to(folder).as_posix()).startswith(".") and "/." not in rel}


def test_an_export_over_another_datasets_export_is_refused_and_replaced_whole_with_overwrite(planted, tmp_path,
                                                                                               capsys):
    a = make_concretebatch(tmp_path, "A")
    b = make_concretebatch(tmp_path, "B", {"a1": "relation", "a3": "attribute"})  # as many shards as A
    out = tmp_path / "export"
    assert export(a, out) == 0
    before = tree(out)
    capsys.readouterr()
    assert export(b, out) == 2  # its file names are A's: it used to keep A's rows as "already complete"
    err = " ".join(capsys.readouterr().err.split())
    assert f"--out {out} holds an export of A other than this export of {b}" in err and "--overwrite" in err
    assert tree(out) == before
    assert export(b, out, "--overwrite") == 0
    assert rows(out) == records(b) != records(a)
    assert export(planted, out) == 2  # more shards, other file names: they used to land beside B's
    assert export(planted, out, "--overwrite") == 0
    assert rows(out) == records(planted)
    assert sorted(p.name for p in out.iterdir()) == [f"train-0000{n}-of-00003.parquet" for n in range(3)]
    # the same dataset again into its own complete export: nothing is written
    mtimes = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    assert export(planted, out) == 0
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_hf_export_keeps_a_hand_written_card_and_never_mixes_two_datasets(planted, tmp_path, capsys):
    import datasets

    repo = tmp_path / "repo"  # a cloned Hub dataset repository
    repo.mkdir()
    (repo / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    card = repo / "README.md"
    card.write_text("---\nlicense: cc-by-4.0\n---\n# My dataset\n\nWritten by hand.\n")
    assert export(planted, repo, "--to", "hf") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{card} is a dataset card that `concrete-jungle export` did not write; it is kept" in err
    assert export(planted, repo, "--to", "hf", "--overwrite") == 2  # --overwrite replaces only an export of ours
    assert sorted(p.name for p in repo.iterdir()) == [".gitattributes", "README.md"]
    assert card.read_text().endswith("Written by hand.\n")

    card.unlink()
    assert export(planted, repo, "--to", "hf") == 0
    small = make_concretebatch(tmp_path, "A")
    assert export(small, repo, "--to", "hf") == 2
    assert f"--out {repo} holds an export of {planted.name} other than" in " ".join(capsys.readouterr().err.split())
    # each load with a cache of its own: `datasets` caches a folder by its card's file pattern, not by its files
    assert len(datasets.load_dataset(str(repo), split="train", cache_dir=str(tmp_path / "c1"))) == len(
        records(planted))
    assert export(small, repo, "--to", "hf", "--overwrite") == 0
    loaded = datasets.load_dataset(str(repo), split="train", cache_dir=str(tmp_path / "c2"))
    assert sorted(loaded["id"]) == [r[0] for r in records(small)]  # A's rows alone, under A's card
    assert "# A: a ConcreteBatch" in card.read_text() and "Parquet file(s); records" in card.read_text()
    assert sorted(p.name for p in repo.iterdir()) == [".gitattributes", "README.md", "data"]


@pytest.mark.processes
def test_a_replacement_stopped_half_way_leaves_the_earlier_export_whole_and_the_next_run_finishes(planted, tmp_path):
    small = make_concretebatch(tmp_path, "A")
    out = tmp_path / "export"
    assert export(small, out) == 0
    before = tree(out)

    def cap():  # a full disk: every file it writes stops at 4 KiB, so the first Parquet file of the three fails
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    stopped = subprocess.run([sys.executable, "-m", "concrete_jungle.cli", "export", str(planted), str(out),
                              "--overwrite", "--no-progress"], capture_output=True, text=True, timeout=300,
                             preexec_fn=cap)
    assert stopped.returncode == 2, stopped.stderr[-2000:]
    assert "could not write" in stopped.stderr and "Traceback" not in stopped.stderr
    assert tree(out) == before  # A's export, whole; the new one only in the hidden staging folder
    assert export(planted, out, "--overwrite") == 0
    assert rows(out) == records(planted)
    assert not (out / ".export-staging").exists()
    meta = json.loads(pq.read_schema(out / "train-00000-of-00003.parquet").metadata[b"concrete_jungle"])
    assert meta["dataset"] == planted.name


def test_every_negative_is_exported_and_one_without_a_picture_is_null(tmp_path):
    from concrete_jungle.concretebatch import index_shards, read_member, shard_urls

    data = make_k_negative_batch(tmp_path, "K")
    out = tmp_path / "export"
    assert export(data, out) == 0
    stored = {json.loads(read_member(r["json"]))["id"]: r for r in index_shards(shard_urls(data))}
    exported = {r["id"]: r for path in sorted(out.glob("*.parquet")) for r in pq.read_table(path).to_pylist()}
    assert sorted(exported) == sorted(stored) == [sid for sid, _, _ in K_RECORDS]  # every record, none refused
    for sid, caption, negatives in K_RECORDS:
        row, members = exported[sid], stored[sid]
        got = [{"caption": row["neg_caption"], "image": row["neg_image"], "concreteness": row["concreteness"]},
               *row["more_negatives"]]
        assert row["caption"] == caption and len(got) == len(negatives)
        for k, ((text, has_picture, _, c), negative) in enumerate(zip(negatives, got)):
            jpg = "neg.jpg" if k == 0 else f"neg{k + 1}.jpg"
            assert negative["caption"] == text and negative["concreteness"] == c
            # the stored JPEG unchanged, or null: never the anchor's picture in its place
            assert negative["image"] == ({"bytes": read_member(members[jpg]), "path": None} if has_picture else None)

    datasets = pytest.importorskip("datasets")
    from PIL import Image

    loaded = datasets.load_dataset("parquet", data_files=str(out / "*.parquet"), split="train",
                                   cache_dir=str(tmp_path / "hf-cache"))
    for row in loaded:
        negatives = dict((sid, n) for sid, _, n in K_RECORDS)[row["id"]]
        pictures = [row["neg_image"], *(n["image"] for n in row["more_negatives"])]
        assert [p is not None for p in pictures] == [has for _, has, _, _ in negatives]
        # decoded as pictures, the further negatives' as the first's (the feature description says so)
        assert all(isinstance(p, Image.Image) and p.size == (48, 32) for p in pictures if p is not None)


def test_an_export_written_before_a_column_was_added_is_written_again(tmp_path):
    """Resuming into an export of the same dataset made without `more_negatives` must not leave a folder whose files
    have two layouts (`datasets` refuses to load it)."""
    import pyarrow as pa

    data = make_k_negative_batch(tmp_path, "K")
    out = tmp_path / "export"
    assert export(data, out) == 0
    path = out / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    older = table.drop_columns(["more_negatives"])
    pq.write_table(older.replace_schema_metadata(table.schema.metadata), path)
    assert "more_negatives" not in pq.read_schema(path).names
    assert export(data, out) == 0
    assert pq.read_table(path).equals(table) and pq.read_schema(path).metadata == table.schema.metadata
    assert isinstance(table.schema.field("more_negatives").type, pa.ListType)
