"""Export kvwise's spans to Arize Phoenix: `sdk.telemetry.setup` with Phoenix's URL and a project name.

    make phoenix &                                           # UI, OTLP and REST on http://127.0.0.1:6006
    python -m local_backend serve --model default &
    python -m examples.export_phoenix http://127.0.0.1:8000 http://127.0.0.1:6006

Then open Phoenix, project `kvwise-example`: each call is an LLM span with its token counts, cache
reads and cost, and its `prefill` and `decode` children. `make phoenix-demo` does all of this for
you; for Jaeger, Tempo or any other OTLP collector see `otlp_export.py`.
"""

from __future__ import annotations

import sys

import openai
from opentelemetry.sdk.trace import TracerProvider

import sdk
from sdk.telemetry import setup

PROJECT = "kvwise-example"
SYSTEM = "You are kvwise's helper. Answer in one short sentence about LLM inference. " * 4
QUESTION = "What is decode?"


def main(base_url: str, phoenix_url: str, model: str = "default", project: str = PROJECT) -> TracerProvider:
    """Two streamed calls sharing a prefix (the second reads the cache), traced to Phoenix; returns the provider."""
    provider = setup(phoenix_url, service_name="kvwise-example", project=project)  # the global provider now
    client = sdk.wrap(openai.OpenAI(base_url=f"{base_url}/v1", api_key="local"))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for _ in range(2):
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=24, stream=True, stream_options={"include_usage": True}
        )
        for _ in stream:
            pass
    provider.shutdown()  # flush before exit
    return provider


if __name__ == "__main__":
    main(*(sys.argv[1:3] if len(sys.argv) > 2 else ("http://127.0.0.1:8000", "http://127.0.0.1:6006")))
