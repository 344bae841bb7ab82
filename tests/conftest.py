"""Shared fixtures: the provider simulator every SDK test talks to over loopback, and headless Chromium.

Under CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a CI result is
reproducible; locally it keeps exploring new examples.
"""

import os

from hypothesis import settings

from tests.browser import browser  # noqa: F401 (the headless Chromium fixture of the browser tests)
from tests.simulator.fixtures import simulator  # noqa: F401

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
