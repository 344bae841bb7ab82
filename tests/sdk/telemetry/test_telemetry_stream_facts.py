"""What a stream's events say beyond text and usage reaches the span as a whole answer's would:
Anthropic's cache diagnosis (in `message_start`), OpenAI's service tier and system fingerprint.
Real clients over loopback against the simulator, the real OpenTelemetry SDK."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion

import sdk
from sdk import semconv as sc
from sdk.adapters.responses import response_facts
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

QUESTION = [{"role": "user", "content": "What is prefill?"}]


async def test_a_streamed_anthropic_answer_carries_the_servers_cache_miss_reason(
    anthropic_client: Any, otel: Otel
) -> None:
    wrapped = sdk.wrap(anthropic_client, tracer_provider=otel.tracer_provider, provider="anthropic")
    for system in (LONG_SYSTEM, LONG_SYSTEM + " Be terse."):
        await collect(
            await resolve(
                wrapped.messages.create(
                    model="claude-sonnet-4-6", max_tokens=64, system=system, messages=QUESTION, stream=True
                )
            )
        )
    first, second = (dict(span.attributes or {}) for span in otel.spans() if span.parent is None)
    assert sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER not in first
    assert (second[sc.KVWISE_PREFIX_BREAK_CAUSE], second[sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER]) == (
        "system_changed",
    ) * 2


async def test_a_streamed_openai_answer_carries_its_service_tier_and_system_fingerprint(
    openai_client: Any, otel: Otel
) -> None:
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    chunks = await collect(
        await resolve(
            wrapped.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True, service_tier="auto")
        )
    )
    [root] = [span for span in otel.spans() if span.parent is None]
    attributes = dict(root.attributes or {})
    assert attributes[sc.OPENAI_REQUEST_SERVICE_TIER] == "auto"
    assert attributes[sc.OPENAI_RESPONSE_SERVICE_TIER] == chunks[0].service_tier
    assert attributes[sc.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == chunks[0].system_fingerprint


class _WithStopReason(ChatCompletion):
    """An answer class that defines `stop_reason` itself (a property, not a field)."""

    @property
    def stop_reason(self) -> None:
        return None


def _answer(cls: type[ChatCompletion] = ChatCompletion, **extra: Any) -> ChatCompletion:
    return cls.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [],
            "service_tier": "default",
            "system_fingerprint": "fp",
            **extra,
        }
    )


def _facts_by_getattr(response: Any) -> dict[str, str]:
    """`response_facts` as plain `getattr`/`hasattr` reads it: what the pydantic shortcut must agree with."""
    facts: dict[str, str] = {}
    tier = getattr(response, "service_tier", None)
    if isinstance(tier, str) and not hasattr(response, "stop_reason"):
        facts["service_tier"] = tier
    if isinstance(fingerprint := getattr(response, "system_fingerprint", None), str):
        facts["system_fingerprint"] = fingerprint
    reason = getattr(getattr(getattr(response, "diagnostics", None), "cache_miss_reason", None), "type", None)
    if isinstance(reason, str):
        facts["cache_miss_reason"] = reason
    return facts


@pytest.mark.parametrize(
    "response",
    [
        _answer(),
        _answer(stop_reason=None),  # an extra field, even None, says the tier is in the usage
        _answer(_WithStopReason),  # so does a name the class defines
        _answer(diagnostics={"cache_miss_reason": {"type": "x"}}),  # an extra field that is no model
        SimpleNamespace(
            service_tier="flex", diagnostics=SimpleNamespace(cache_miss_reason=SimpleNamespace(type="ttl"))
        ),
        Message.model_validate(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
                "diagnostics": {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 10}},
            }
        ),
    ],
    ids=[
        "fields",
        "extra-stop-reason",
        "class-stop-reason",
        "extra-diagnostics",
        "plain-object",
        "anthropic-diagnostics",
    ],
)
def test_response_facts_read_a_pydantic_answer_as_getattr_would(response: Any) -> None:
    for _ in range(2):  # the second read goes through the remembered class lookups
        assert response_facts(response) == _facts_by_getattr(response)
