from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.fail(f"tests read the benchmark files from {SHARED_DATA}; check out the repo beside shared/")
    return SHARED_DATA


@pytest.fixture(scope="session")
def nlp():
    from concrete_jungle.keywords import load_spacy

    return load_spacy()


@pytest.fixture(scope="session")
def ratings():
    from concrete_jungle.concreteness import load_ratings

    return load_ratings()
