"""Shared fixtures: the provider simulator every SDK test talks to over loopback.

Under CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a CI result is
reproducible; locally it keeps exploring new examples.
"""

import os

from hypothesis import settings

from tests.simulator.fixtures import simulator  # noqa: F401

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
