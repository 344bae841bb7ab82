"""One worker of a fleet (tests/sdk/memory/test_shared_state.py): a process of its own that wraps its own
openai client and makes the calls it is told, printing one JSON line per answer.

    python -m tests.sdk.fleet_worker ARGUMENTS.json   # {"task": "fanout", "base_url": ..., "state": ..., "n": 8, ...}

Tasks: "fanout" (`n` concurrent calls sharing a long system prompt, fan-out warm), "calls" (`n` calls
one after another with `system`, or with each of a list of them). Every line has the answer's cache reads and
writes, the output limit the request carried and the span's `kvwise.*` attributes.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api

MODEL = "gpt-sim-1"


def _answer(client: Any, system: str, question: str) -> dict[str, Any]:
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]
    )
    usage = adapter_for(Api.CHAT).usage(response)
    assert usage is not None
    return {
        "input": usage.input_tokens,
        "read": usage.cache_read_tokens,
        "write": usage.cache_write_tokens,
        "output": usage.output_tokens,
    }


def main(arguments: dict[str, Any]) -> None:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = sdk.Policy(retries=0, **arguments.get("policy", {}))
    client = sdk.wrap(
        openai.OpenAI(base_url=arguments["base_url"], api_key="fleet-key", max_retries=0),
        policy,
        tracer_provider=provider,
        state=arguments.get("state"),
    )
    system, n = arguments["system"], arguments["n"]
    answers: list[dict[str, Any]] = []
    if arguments["task"] == "fanout":
        lock = threading.Lock()

        def one(index: int) -> None:
            answer = _answer(client, system, f"Part {arguments['worker']}.{index}: what does rule {index} say?")
            with lock:
                answers.append(answer)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        systems = system if isinstance(system, list) else [system] * n  # one system prompt per call, or one for all
        for index in range(n):
            answers.append(_answer(client, systems[index], f"Ticket {arguments['worker']}.{index}: help."))
    spans = [
        {
            key: value if isinstance(value, (str, int, float, bool)) else list(value)
            for key, value in (span.attributes or {}).items()
            if key.startswith("kvwise.")
        }
        for span in exporter.get_finished_spans()
        if span.kind.name == "CLIENT"
    ]
    print(json.dumps({"answers": answers, "spans": spans}), flush=True)


if __name__ == "__main__":
    given = Path(sys.argv[1])  # a file, which the worker removes: a 20k-token prompt is too long for argv
    arguments = json.loads(given.read_text())
    given.unlink()
    main(arguments)
