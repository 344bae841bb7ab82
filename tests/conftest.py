"""Shared fixtures: the provider simulator every SDK test talks to over loopback."""

from tests.simulator.fixtures import simulator  # noqa: F401
