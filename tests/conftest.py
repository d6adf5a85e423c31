"""Shared test fixtures: paths to the golden data in ../shared/fixtures (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Bad takes are checked and reported everywhere, but not re-rendered unless a test asks: the tiny random models
# are never the right length, so the default 2 retries would triple every synthesis of the suite. Set before any
# Settings or CLI parser is built (subprocesses inherit it); the tests of retrying pass their own count.
os.environ.setdefault("COSYVOICE_TAKE_RETRIES", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


def fixture_dir(name: str) -> Path:
    """The golden folder `name`. Without ../shared beside the repo the test is skipped with the reason,
    except under CI (CI=true), where golden data must be there: a missing folder fails the run."""
    path = SHARED_FIXTURES / name
    if not path.is_dir():
        reason = f"golden fixtures not found at ../shared/fixtures/{name} (clone the shared data beside the repo)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def v1_fixture() -> Path:
    return fixture_dir("cosyvoice1-tiny")


def _tiny(tmp_path_factory: pytest.TempPathFactory, name: str, **options) -> Path:
    from cosyvoice_ui.testing.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / name, **options)


@pytest.fixture(scope="session", autouse=True)
def _single_thread() -> None:
    """Tiny models run faster on one thread (and tests are never timed)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M folder (no preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-base")


@pytest.fixture(scope="session")
def tiny_sft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M-SFT folder (7 preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-sft", sft=True)


@pytest.fixture(scope="session")
def tiny_instruct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M-Instruct folder."""
    return _tiny(tmp_path_factory, "tiny-instruct", instruct=True)



@pytest.fixture(scope="session")
def tiny_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice2-0.5B folder (with 7 preset speakers in spk2info.pt)."""
    return _tiny(tmp_path_factory, "tiny-v2", family="v2", sft=True)


@pytest.fixture(scope="session")
def tiny_v3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Fun-CosyVoice3-0.5B folder (no preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-v3", family="v3")
