"""The suite's own rules: under CI a missing golden folder fails the run instead of skipping quietly."""

from __future__ import annotations

import pytest

from .conftest import fixture_dir


def test_missing_golden_data_fails_under_ci(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no-such-fixture"):
        fixture_dir("no-such-fixture")


def test_missing_golden_data_skips_with_the_reason_elsewhere(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="clone the shared data beside the repo"):
        fixture_dir("no-such-fixture")


def test_present_golden_data_is_found() -> None:
    assert (fixture_dir("cosyvoice1-tiny") / "README.md").is_file()
