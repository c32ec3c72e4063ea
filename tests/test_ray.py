"""ConcretePlant on Ray Data (a local Ray of 2 CPUs): the same records as the local engine, also when an actor
or the driver is killed mid-run."""

import hashlib
import json
import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray engine needs pip install 'concrete-jungle[ray]'")

from concrete_jungle.cli import main  # noqa: E402
from test_plant import make_dataset, plant_args  # noqa: E402

EXTRA = ["--samples-per-shard", 12, "--batch-size", 4]


def records(out):
    """Every shard's bytes and every manifest row without the engine that wrote it."""
    shards = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("shard-*.tar"))}
    rows = [{k: v for k, v in json.loads(line).items() if k != "engine"}
            for line in (out / "manifest.jsonl").read_text().splitlines()]
    return shards, rows


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


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
    from concrete_jungle.tiny import build_tiny_sdxl_img2img

    model = build_tiny_sdxl_img2img(tmp_path / "sdxl")
    captions, images = make_dataset(tmp_path, 10)
    editor = ["--editor", "diffusers", "--editor-model", model, "--size", 64, "--device", "cpu"]
    assert main(plant_args(captions, images, tmp_path / "local", *EXTRA, *editor)) == 0
    assert main(plant_args(captions, images, tmp_path / "ray", *EXTRA, *editor, "--engine", "ray")) == 0
    assert records(tmp_path / "ray") == records(tmp_path / "local")


@pytest.mark.slow
def test_an_edit_actor_killed_mid_run_is_replaced_and_the_records_are_the_same(local_ray, dataset, tmp_path):
    from ray.util.state import list_actors

    captions, images, expected = dataset
    out = tmp_path / "ray"
    killed = []

    def kill_an_editor():  # from outside, as a lost worker: SIGKILL the edit actor's process once
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for actor in list_actors(filters=[("state", "=", "ALIVE")]):
                if "_Editor" in actor.class_name and (out / "manifests").is_dir():
                    os.kill(actor.pid, signal.SIGKILL)
                    killed.append(actor.pid)
                    return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_an_editor, daemon=True)
    killer.start()
    assert main(plant_args(captions, images, out, *EXTRA, "--engine", "ray")) == 0
    killer.join()
    assert killed, "no edit actor was found to kill"
    assert records(out) == expected
