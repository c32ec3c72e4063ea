"""ConcretePlant on Ray Data (a local Ray of 2 CPUs): the same records as the local engine, also when an actor
or the driver is killed mid-run."""

import hashlib
import json
import os
import signal
import tarfile
import threading
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="the Ray engine needs pip install 'concrete-jungle[ray]'")

from concrete_jungle.cli import main  # noqa: E402
from plant_fixtures import make_dataset, plant_args  # noqa: E402

# a local Ray starts processes of its own (GCS, raylet, workers): CI runs these in its processes step
pytestmark = pytest.mark.processes

EXTRA = ["--samples-per-shard", 12, "--batch-size", 4]


def records(out):
    """Every shard's bytes and every manifest row without the engine that wrote it."""
    shards = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("shard-*.tar"))}
    rows = [{k: v for k, v in json.loads(line).items() if k != "engine"}
            for line in (out / "manifest.jsonl").read_text().splitlines()]
    return shards, rows


@pytest.fixture(scope="module")
def local_ray():
    # the actors import the tests' own plugins (plugin_example) as a user's actors import theirs
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    yield
    ray.shutdown()


def plant_with_tiny_sdxl(root, samples):
    """Captions, images and the local engine's dataset with the tiny SDXL editor (slow enough to be killed mid-run),
    edited on one thread as an edit actor of one CPU edits."""
    from concrete_jungle.models.tiny import build_tiny_sdxl_img2img

    captions, images = make_dataset(root, samples, image_size=32)
    editor = ["--editor", "diffusers", "--editor-model", build_tiny_sdxl_img2img(root / "sdxl"), "--size", 64,
              "--device", "cpu"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(plant_args(captions, images, root / "local", *EXTRA, *editor)) == 0
    finally:
        torch.set_num_threads(threads)
    return captions, images, editor + ["--engine", "ray", "--ray-edit-cpus", 1], records(root / "local")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    captions, images = make_dataset(root, 40, image_size=32)
    reference = root / "local"
    assert main(plant_args(captions, images, reference, *EXTRA)) == 0
    return captions, images, records(reference)


def test_the_ray_engine_writes_the_local_engine_s_records(local_ray, dataset, tmp_path):
    captions, images, expected = dataset
    out = tmp_path / "ray"
    assert main(plant_args(captions, images, out, *EXTRA, "--engine", "ray", "--ray-actors", "1,1,1")) == 0
    assert records(out) == expected  # byte-identical shards, the same manifest rows
    assert {json.loads(line)["engine"] for line in (out / "manifest.jsonl").read_text().splitlines()
            if json.loads(line)["status"] == "ok"} == {"ray"}
    assert json.loads((out / "summary.json").read_text())["engine"] == "ray"


def test_the_ray_engine_with_the_tiny_sdxl_editor_matches_the_local_engine(local_ray, tmp_path):
    captions, images, ray_args, expected = plant_with_tiny_sdxl(tmp_path, 10)
    assert main(plant_args(captions, images, tmp_path / "ray", *EXTRA, *ray_args)) == 0
    assert records(tmp_path / "ray") == expected


def test_edit_actors_call_the_editor_on_their_main_thread(local_ray, dataset, tmp_path):
    """Ray Data calls an actor on a second thread unless told otherwise; the editor must run where the local
    engine runs it (an editor that insists on the main thread fails otherwise)."""
    captions, images, _ = dataset
    editor = ["--editor", "plugin_example:MainThreadMirrorEditor"]
    assert main(plant_args(captions, images, tmp_path / "local", *EXTRA, *editor)) == 0
    assert main(plant_args(captions, images, tmp_path / "ray", *EXTRA, *editor, "--engine", "ray")) == 0
    assert records(tmp_path / "ray") == records(tmp_path / "local")


def busy_editor_pids() -> list[int]:
    """Processes of edit actors while they edit a batch (Ray titles them ``ray::MapWorker(MapBatches(_Editor))``,
    with ``.submit`` while a batch runs)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "MapBatches(_Editor)).submit" in title:
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
def test_an_edit_actor_killed_mid_run_is_replaced_and_the_records_are_the_same(local_ray, tmp_path):
    captions, images, ray_args, expected = plant_with_tiny_sdxl(tmp_path, 96)
    out = tmp_path / "ray"
    killed = []

    def kill_an_editor():  # from outside, as a lost worker: SIGKILL the edit actor's process while it edits
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            pids = busy_editor_pids() if (out / "manifests").is_dir() else []
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_an_editor, daemon=True)
    killer.start()
    assert main(plant_args(captions, images, out, *EXTRA, *ray_args)) == 0
    killer.join()
    assert killed, "no edit actor was found to kill"
    assert records(out) == expected


@pytest.mark.slow  # ~90 s; the fast set keeps the store readers (test_stores.py) and Ray's plant of a folder
def test_the_ray_engine_reads_stores_in_ray_tasks_and_writes_the_local_engine_s_records(local_ray, tmp_path):
    """WebDataset shards (img2dataset's layout with a failed download, a key repeated in a later shard, a damaged
    shard) and a Parquet file in one input: Ray Data tasks read each file with the local readers, the edit actors
    read the images they edit from the stores by locator, and the records, skips and reasons are the local
    engine's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from concrete_jungle.plant.ray import RayCandidates
    from concrete_jungle.sources import read_samples, read_store_file
    from test_stores import add, caption, jpeg

    wds = tmp_path / "wds"
    wds.mkdir()
    for shard, keys in enumerate(([f"{i:09d}" for i in range(10)], [f"{i:09d}" for i in range(10, 20)],
                                  [f"{i:09d}" for i in range(5)])):  # the third repeats keys of the first
        with tarfile.open(wds / f"{shard:05d}.tar", "w") as tar:
            for key in keys:
                add(tar, f"{key}.jpg", jpeg(int(key)))
                add(tar, f"{key}.txt", caption(int(key)).encode())
        pq.write_table(pa.table({"key": keys + [f"{90 + shard:09d}"], "status": ["success"] * len(keys) + ["failed"],
                                 "error_message": [None] * len(keys) + ["HTTP 404"]}), wds / f"{shard:05d}.parquet")
    data = (wds / "00001.tar").read_bytes()
    (wds / "00001.tar").write_bytes(data[: len(data) // 2 + 100])  # damaged in the middle of a member
    pq.write_table(pa.table({"key": [f"p{i}" for i in range(12)], "caption": [caption(i) for i in range(12)],
                             "image": [{"bytes": jpeg(100 + i), "path": None} for i in range(12)]}),
                   wds / "store.parquet", row_group_size=5)  # the stores of one input share a folder
    inputs = [str(wds)]
    tasks = [("webdataset", str(p), None, {}) for p in sorted(wds.glob("*.tar"))] + [
        ("parquet", str(wds / "store.parquet"), None, {})]
    assert list(RayCandidates(None, "brysbaert", 1).read_files(tasks)) == [read_store_file(t) for t in tasks]
    samples = list(read_samples(inputs, map_files=RayCandidates(None, "brysbaert", 1).read_files))
    assert samples == list(read_samples(inputs))
    assert {"00002/000000000", "00001.tar#damaged", "000000090"} <= {s.id for s in samples}
    base = ["plant", "--captions", *inputs, "--mode", "hc", "--no-progress", *map(str, EXTRA)]
    assert main([*base, "--out", str(tmp_path / "local")]) == 0
    assert main([*base, "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-actors", "1,1,1"]) == 0
    assert records(tmp_path / "ray") == records(tmp_path / "local")
    skipped = [r for r in records(tmp_path / "local")[1] if r["status"] != "ok"]
    assert any(r["id"] == "00001.tar#damaged" for r in skipped) and any(r["id"] == "000000090" for r in skipped)
