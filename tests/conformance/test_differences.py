"""The reviewed list of deliberate differences (`differences.toml`): each entry complete, and naming
a test function or one parametrization of it."""

from __future__ import annotations

import tomllib

from tests.conformance.kvwise_wrap_plugin import PACKAGES
from tests.conformance.run import DIFFERENCES, _listed, differences


def test_each_entry_names_a_package_a_test_and_its_reason() -> None:
    entries = tomllib.loads(DIFFERENCES.read_text())["difference"]
    assert entries
    for entry in entries:
        assert set(entry) == {"package", "test", "reason"}, entry
        assert entry["package"] in PACKAGES
        assert entry["test"].startswith("tests/") and ".py::test_" in entry["test"], entry["test"]
        assert len(entry["reason"].split()) >= 8, entry["reason"]


def test_an_entry_covers_its_test_function_s_parametrizations_and_nothing_else() -> None:
    listed = next(iter(differences().values()))
    entry = next(iter(listed))
    assert _listed(entry, listed) == entry
    assert _listed(f"{entry}[sync]", listed) == entry
    assert _listed(f"{entry}_and_more", listed) is None
    assert _listed(f"{entry}_and_more[sync]", listed) is None
