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


def test_every_entry_of_the_fast_tiers_exclusions_names_a_test() -> None:
    """SLOW_HERE (conftest) keeps named files and tests out of `test.sh --fast`; a renamed test must not slip back
    into the fast tier unnoticed."""
    import ast

    from .conftest import LONGEST_FIRST, REPO, SLOW_HERE

    for entry in SLOW_HERE:
        path, _, name = entry.partition("::")
        assert (REPO / path).is_file(), entry
        if name:
            tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
            assert name in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, entry
    for path in LONGEST_FIRST:
        assert (REPO / path).is_file(), path

