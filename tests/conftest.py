import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # under pytest-xdist the workers share the cores: one torch thread each (and in the commands the tests start),
    # rather than every worker running as many threads as there are cores, taking turns
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import benchmark_fixtures  # noqa: E402
from plant_fixtures import make_dataset, plant_args  # noqa: E402


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """SugarCrepe, SugarCrepe++ and their images in the layout `eval --data-root` expects, from our captions."""
    return benchmark_fixtures.write_data_root(tmp_path_factory.mktemp("bench"))


@pytest.fixture(scope="module")
def clip():
    """The tiny random CLIP the benchmark tests score with (one per module: a test may change its weights)."""
    from concrete_jungle.models import load_model

    return load_model("cj-tiny", "none", seed=0)


@pytest.fixture(scope="session")
def nlp():
    from concrete_jungle.nlp import load_spacy

    return load_spacy()


@pytest.fixture(scope="session")
def ratings():
    from concrete_jungle.plant.concreteness import load_ratings

    return load_ratings()


def require_system_dependency(available: bool, what: str, install: str) -> None:
    """Skip a test whose system package is missing on a developer's machine; under CI (.ci/run sets
    CJ_REQUIRE_SYSTEM_DEPS=1) fail it instead, so CI cannot pass without running what it claims to test."""
    if available:
        return
    message = f"{what} {'are' if ' and ' in what else 'is'} not installed ({install})"
    if os.environ.get("CJ_REQUIRE_SYSTEM_DEPS") == "1":
        pytest.fail(message + "; CI requires it")
    pytest.skip(message)


# searched on PATH, or on CJ_SYSTEM_PATH where set: .ci/run points it at an empty folder to run the tests as on a
# machine without Chromium
SYSTEM_PATH = os.environ.get("CJ_SYSTEM_PATH")
CHROMIUM = shutil.which("chromium", path=SYSTEM_PATH) or shutil.which("chromium-browser", path=SYSTEM_PATH)
CHROMEDRIVER = shutil.which("chromedriver", path=SYSTEM_PATH)
ARTIFACTS = Path(os.environ.get("CJ_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "test-artifacts"))


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium driven by selenium (skipped, or under CI failed, without Chromium and chromedriver),
    logging every network request it makes (``driver.get_log("performance")``). One for a module: requested before
    a module's other fixtures, a missing Chromium skips the test before they are built."""
    require_system_dependency(bool(CHROMIUM and CHROMEDRIVER), "Chromium and chromedriver",
                              "apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--allow-file-access-from-files"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# training flags for the tiny random-init model, fast on a CPU
TINY_TRAIN = ["--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set", "data.workers=0",
              "--batch-size", "8", "--no-progress"]


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """A small ConcreteBatch (48 samples, text-only negatives) made by `plant`, for commands that read one."""
    root = tmp_path_factory.mktemp("planted")
    captions, images = make_dataset(root, 48, image_size=32)
    assert main(plant_args(captions, images, root / "cb", "--samples-per-shard", 16)) == 0
    return root / "cb"


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def run(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--data", str(planted), "--out", str(out), "--steps", "3", *TINY_TRAIN]) == 0
    return out

