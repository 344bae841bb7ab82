"""Wrapped calls from a process of its own: `python -m tests.sdk.memory.store_worker '<json>'` prints their
spans' facts as JSON.

The JSON names the base URL, the system prompts (one call each, through a real `openai` client) and
the `state` to wrap with (absent: the default, the SQLite file under $XDG_CACHE_HOME). For each call
it prints whether its span says the store was degraded, why, and the cache break it names; the
process then exits as a CLI run does, which is when the store writes the last fingerprints.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc

FACTS = {
    "degraded": sc.KVWISE_STATE_DEGRADED,
    "reason": sc.KVWISE_STATE_DEGRADED_REASON,
    "break_cause": sc.KVWISE_PREFIX_BREAK_CAUSE,
}


def main(spec: dict[str, Any]) -> list[dict[str, Any]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bare = openai.OpenAI(base_url=spec["base_url"], api_key="test-key", max_retries=0)
    client = sdk.wrap(bare, sdk.Policy(retries=0), tracer_provider=provider, state=spec.get("state"))
    for system in spec["systems"]:
        client.chat.completions.create(
            model="gpt-5.4",
            max_tokens=16,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "Which build is this?"}],
        )
    spans = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    return [{name: span.get(attribute) for name, attribute in FACTS.items()} for span in spans]


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
