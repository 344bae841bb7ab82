"""`sdk.providers` is ground floor: it imports only the root vocabulary, never a step's folder, so every
step may ask it for a provider's facts."""

from __future__ import annotations

import ast

from sdk import providers
from sdk.providers.platforms import KNOWN_PLATFORMS
from tests.test_import_graph import ROOT, import_graph

ALLOWED = {"sdk.call", "sdk.semconv", "sdk.tokens", "sdk._constants"}


def test_providers_import_only_the_root_vocabulary_and_each_other():
    graph = import_graph("sdk")
    imported = {target for source, targets in graph.items() if source.startswith("sdk.providers") for target in targets}
    assert imported, "the import graph lists no sdk.providers module"
    assert {target for target in imported if not target.startswith("sdk.providers")} <= ALLOWED


def test_wrap_telemetry_cache_and_lint_read_provider_facts_from_providers():
    graph = import_graph("sdk")
    askers = {source for source, targets in graph.items() if any(t.startswith("sdk.providers") for t in targets)}
    assert {"sdk.wrap", "sdk.telemetry.attributes", "sdk.cache.hints", "sdk.prompt.lint"} <= askers


def test_no_module_outside_providers_spells_a_provider_host():
    hosts = {host for facts in providers.PROVIDERS for host in (*facts.hosts, *(s for s, _ in facts.servers))}
    hosts |= {suffix for suffix, _ in KNOWN_PLATFORMS}
    assert "api.openai.com" in hosts and ".amazonaws.com" in hosts
    spelled = {
        (str(path.relative_to(ROOT)), node.value)
        for path in (ROOT / "sdk").rglob("*.py")
        if "providers" not in path.parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in hosts
    }
    assert not spelled
