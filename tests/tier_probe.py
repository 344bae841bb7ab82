"""A pytest plugin for tests/test_tiers.py: after collection, print each test's id and tier markers."""

from __future__ import annotations

import pytest

TIER_NAMES = ("integration", "browser", "native", "slow")


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        tiers = sorted(name for name in TIER_NAMES if item.get_closest_marker(name) is not None)
        uses_browser = "browser" in getattr(item, "fixturenames", ())
        print(f"TIER\t{item.nodeid}\t{','.join(tiers)}\t{int(uses_browser)}")
