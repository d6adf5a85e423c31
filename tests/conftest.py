"""Shared test fixtures: paths to the golden data in ../shared/fixtures (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


def fixture_dir(name: str) -> Path:
    """The golden folder `name`, or skip the test with the reason when ../shared is not beside the repo."""
    path = SHARED_FIXTURES / name
    if not path.is_dir():
        pytest.skip(f"golden fixtures not found at ../shared/fixtures/{name} (clone the shared data beside the repo)")
    return path


@pytest.fixture(scope="session")
def v1_fixture() -> Path:
    return fixture_dir("cosyvoice1-tiny")
