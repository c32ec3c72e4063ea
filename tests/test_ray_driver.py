"""The Ray engine's driver killed mid-run (apart from tests/test_ray.py, whose Ray stays up for its module)."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray", reason="the Ray engine needs pip install 'concrete-jungle[ray]'")

from plant_fixtures import plant_args  # noqa: E402
from test_ray import EXTRA, plant_with_tiny_sdxl, records  # noqa: E402


@pytest.mark.slow
def test_the_driver_killed_mid_run_then_the_same_command_gives_the_same_records(tmp_path):
    captions, images, ray_args, expected = plant_with_tiny_sdxl(tmp_path, 96)
    out = tmp_path / "ray"
    args = [sys.executable, "-m", "concrete_jungle.cli",
            *map(str, plant_args(captions, images, out, *EXTRA, *ray_args))]
    try:
        driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list((out / "manifests").glob("*.jsonl")):
            time.sleep(0.2)
        assert driver.poll() is None, "the run ended before it could be killed"
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the local Ray it started
        driver.wait()
        assert not (out / "manifest.jsonl").exists()
        finished = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert finished.returncode == 0, finished.stderr[-2000:]
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
    assert records(out) == expected
    ids = [r["id"] for r in records(out)[1]]
    assert len(ids) == len(set(ids))  # nothing twice
