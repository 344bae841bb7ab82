"""The reviewed list of deliberate differences (`differences.toml`): each entry complete, and naming
a test function or one parametrization of it."""

from __future__ import annotations

import tomllib

from tests.conformance.kvwise_wrap_plugin import PACKAGES
from tests.conformance.run import DIFFERENCES, STILL_OPEN, _listed, _open_entry, differences


def test_each_entry_names_a_package_a_test_and_its_reason() -> None:
    entries = tomllib.loads(DIFFERENCES.read_text())["difference"]
    assert entries
    for entry in entries:
        assert set(entry) == {"package", "test", "reason"}, entry
        assert entry["package"] in PACKAGES
        assert entry["test"].startswith("tests/") and ".py::" in entry["test"] and "::test_" in entry["test"], entry[
            "test"
        ]
        assert len(entry["reason"].split()) >= 8, entry["reason"]


def test_an_entry_covers_its_test_function_s_parametrizations_and_nothing_else() -> None:
    listed = next(iter(differences().values()))
    entry = next(iter(listed))
    assert _listed(entry, listed) == entry
    assert _listed(f"{entry}[sync]", listed) == entry
    assert _listed(f"{entry}_and_more", listed) is None
    assert _listed(f"{entry}_and_more[sync]", listed) is None


def test_each_still_open_entry_names_a_package_a_test_file_or_id_and_what_breaks() -> None:
    entries = tomllib.loads(STILL_OPEN.read_text()).get("open", [])  # none, once every fix is in
    for entry in entries:
        assert set(entry) == {"package", "tests", "breaks"}, entry
        assert entry["package"] in PACKAGES
        assert entry["tests"].startswith("tests/") and ".py" in entry["tests"], entry["tests"]
        assert len(entry["breaks"].split()) >= 8, entry["breaks"]
    assert not {entry["tests"] for entry in entries} & {test for tests in differences().values() for test in tests}


def test_a_still_open_file_covers_its_tests_and_an_id_its_parametrizations_alone() -> None:
    owed = {"tests/a.py": "x", "tests/b.py::test_c": "y"}
    assert _open_entry("tests/a.py::test_any[sync]", owed) == "tests/a.py"
    assert _open_entry("tests/a.pyc::test_any", owed) is None
    assert _open_entry("tests/b.py::test_c[async]", owed) == "tests/b.py::test_c"
    assert _open_entry("tests/b.py::test_cd", owed) is None
