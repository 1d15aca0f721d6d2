"""The table of tests sharing a costly fixture (``./run tests``): it names files that exist
and use that fixture, so it cannot rot into a table of nothing."""

from __future__ import annotations

from pathlib import Path

from support.scheduling import SHARED, group_of

REPO = Path(__file__).resolve().parents[2]


def test_every_shared_file_exists_and_uses_its_fixture() -> None:
    for path, group in SHARED.items():
        source = (REPO / path).read_text()
        assert group == "wheel" or group in source, f"{path} does not use {group}"


def test_a_grouped_test_is_in_its_group_and_any_other_test_alone() -> None:
    assert group_of("tests/e2e/test_scrapyd.py::test_deploy[x]") == "secured_stack"
    assert group_of("tests/e2e/test_seeds.py::test_one") == "tests/e2e/test_seeds.py::test_one"
