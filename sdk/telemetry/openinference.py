"""Call and outcome -> OpenInference span attributes, the flavour Arize Phoenix reads (pure functions).

They go on the call span beside the GenAI ones from `attributes.py`, mapped from the same facts, so
Phoenix lists the call as an LLM span with its tokens, cache reads and cost:

    openinference.span.kind    LLM
    llm.model_name             gen_ai.response.model, else gen_ai.request.model
    llm.provider, llm.system   from gen_ai.provider.name and the client's API
    llm.token_count.prompt     gen_ai.usage.input_tokens (all of them, cached included)
    llm.token_count.completion gen_ai.usage.output_tokens;  .total = prompt + completion
    llm.token_count.prompt_details.cache_read / .cache_write   the cache counts
    llm.cost.prompt            input + cached input + cache write USD;  .completion = output USD
    llm.cost.prompt_details.input / .cache_read / .cache_write   the prompt cost split;
                               .cache_input = cache_read + cache_write (what went through the cache)
    llm.finish_reason          the first of gen_ai.response.finish_reasons
    llm.invocation_parameters  the request's parameters as JSON, without its content (always)

With content capture on the span, the conversation too, keyed as Phoenix's own instrumentations
key it (so Phoenix shows the call and its Playground can replay it):

    llm.input_messages.{i}.message.role / .content     the system prompt first, then the turns;
                               several text parts as .contents.{k}.message_content.type / .text
    llm.input_messages.{i}.message.tool_calls.{j}.tool_call.id / .function.name / .function.arguments
    llm.input_messages.{i}.message.tool_call_id        a tool result (role `tool`, one per result)
    llm.output_messages.{i}.message.*                  the answer, its tool calls included
    llm.tools.{i}.tool.json_schema                     each native tool definition as JSON
    input.value, input.mime_type    the request as sent (JSON);  output.value, output.mime_type  the
                               answer's semconv messages (JSON)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sdk import compat
from sdk import semconv as sc
from sdk._constants import INVOCATION_JSON_CACHE_SIZE
from sdk.adapters import adapter_for
from sdk.call import Call, Provider
from sdk.telemetry.attributes import Attributes, Outcome
from sdk.telemetry.content import to_json

_LLM = sc.OpenInferenceSpanKind.LLM.value
_OPENAI_SYSTEM, _ANTHROPIC_SYSTEM = sc.LlmSystem.OPENAI.value, sc.LlmSystem.ANTHROPIC.value
_PROVIDERS: dict[str, str] = {
    sc.ProviderName.OPENAI.value: sc.LlmProvider.OPENAI.value,
    sc.ProviderName.ANTHROPIC.value: sc.LlmProvider.ANTHROPIC.value,
    sc.ProviderName.AWS_BEDROCK.value: sc.LlmProvider.AWS.value,
    sc.ProviderName.GCP_VERTEX_AI.value: sc.LlmProvider.GOOGLE.value,
    sc.ProviderName.AZURE_AI_INFERENCE.value: sc.LlmProvider.AZURE.value,
    sc.ProviderName.AZURE_AI_OPENAI.value: sc.LlmProvider.AZURE.value,
    sc.ProviderName.DEEPSEEK.value: sc.LlmProvider.DEEPSEEK.value,
    sc.ProviderName.GCP_GEMINI.value: sc.LlmProvider.GOOGLE.value,
    sc.ProviderName.GROQ.value: sc.LlmProvider.GROQ.value,
    sc.ProviderName.MISTRAL_AI.value: sc.LlmProvider.MISTRALAI.value,
    sc.ProviderName.MOONSHOT_AI.value: sc.LlmProvider.MOONSHOT.value,
    sc.ProviderName.PERPLEXITY.value: sc.LlmProvider.PERPLEXITY.value,
    sc.ProviderName.X_AI.value: sc.LlmProvider.XAI.value,
}
"""`gen_ai.provider.name` -> `llm.provider` (the two conventions spell some providers differently)."""
_CONTENT_PARAMS = frozenset(
    {"messages", "prompt", "input", "system", "instructions", "tools", "functions", "prediction"}
)
"""The request's content (and Chat's predicted output), kept out of `llm.invocation_parameters`, which
is written with capture off too."""
_NOT_INVOCATION_PARAMS = _CONTENT_PARAMS | compat.TRANSPORT_KEYWORDS
"""Never in `llm.invocation_parameters`: the content, and the clients' transport options (never sent as
the body; headers may carry credentials)."""
_JSON = sc.MimeType.JSON.value
_SCALARS = frozenset({str, int, bool, type(None)})
"""Value types (exactly these: a subclass may encode otherwise) whose parameters' JSON is remembered;
no floats, as -0.0 equals 0.0 and is written otherwise."""
_SYSTEM, _TOOL = "system", "tool"


def request_attributes(call: Call, provider: str) -> Attributes:
    """Attributes known before sending: span kind, provider, API and the requested model."""
    attributes: Attributes = {
        sc.OPENINFERENCE_SPAN_KIND: _LLM,
        sc.LLM_PROVIDER: _PROVIDERS.get(provider, provider),
        sc.LLM_SYSTEM: _ANTHROPIC_SYSTEM if call.provider == Provider.ANTHROPIC else _OPENAI_SYSTEM,
    }
    if call.model:
        attributes[sc.LLM_MODEL_NAME] = call.model
    return attributes


def outcome_attributes(outcome: Outcome) -> Attributes:
    """Attributes known at the end: the answering model, token counts and cost (see the module table)."""
    attributes: Attributes = {}
    if outcome.end.response_model:
        attributes[sc.LLM_MODEL_NAME] = outcome.end.response_model
    if outcome.finish_reasons:
        attributes[sc.LLM_FINISH_REASON] = outcome.finish_reasons[0]
    usage = outcome.end.usage
    if usage is not None:
        attributes[sc.LLM_TOKEN_COUNT_PROMPT] = usage.input_tokens
        attributes[sc.LLM_TOKEN_COUNT_COMPLETION] = usage.output_tokens
        attributes[sc.LLM_TOKEN_COUNT_TOTAL] = usage.input_tokens + usage.output_tokens
        attributes[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ] = usage.cache_read_tokens
        attributes[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE] = usage.cache_write_tokens
        if usage.reasoning_tokens:
            attributes[sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING] = usage.reasoning_tokens
    cost = outcome.cost
    if cost is not None:
        attributes[sc.LLM_COST_TOTAL] = cost.total_usd
        attributes[sc.LLM_COST_PROMPT] = cost.input_usd + cost.cached_input_usd + cost.cache_write_usd
        attributes[sc.LLM_COST_COMPLETION] = cost.output_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_INPUT] = cost.input_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_READ] = cost.cached_input_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_WRITE] = cost.cache_write_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_INPUT] = cost.cached_input_usd + cost.cache_write_usd
    return attributes


def invocation_attributes(call: Call) -> Attributes:
    """`llm.invocation_parameters`: the body's parameters without its content, set whatever the capture."""
    params = call.params
    parameters = {key: value for key, value in params.items() if key not in _NOT_INVOCATION_PARAMS}
    extra = compat.extra_body_of(params)
    if extra is not None:
        parameters.update((key, value) for key, value in extra.items() if key not in _CONTENT_PARAMS)
    types = tuple(map(type, parameters.values()))
    if _SCALARS.issuperset(types):  # most calls: the same few parameters, call after call
        return {sc.LLM_INVOCATION_PARAMETERS: _scalars_json(tuple(parameters.items()), types)}
    return {sc.LLM_INVOCATION_PARAMETERS: to_json(parameters)}


@functools.lru_cache(maxsize=INVOCATION_JSON_CACHE_SIZE)
def _scalars_json(items: tuple[tuple[str, Any], ...], types: tuple[type, ...]) -> str:
    """`to_json` of parameters whose values are all `_SCALARS`; `types` are theirs, keeping `1` and
    `True` (which compare equal) apart in the memo."""
    return to_json(dict(items))


def content_attributes(
    call: Call,
    system: Sequence[Mapping[str, Any]],
    inputs: Sequence[Mapping[str, Any]],
    outputs: Sequence[Mapping[str, Any]],
) -> Attributes:
    """The conversation as Phoenix reads it (see the module table), from the semconv parts and
    messages `sdk.telemetry.content` built (`system` instructions, `inputs`, `outputs`)."""
    attributes: Attributes = {}
    turns = [{"role": _SYSTEM, "parts": list(system)}] if system else []
    attributes.update(_messages(sc.LLM_INPUT_MESSAGES, [*turns, *inputs]))
    attributes.update(_messages(sc.LLM_OUTPUT_MESSAGES, outputs))
    for index, tool in enumerate(call.tools):
        attributes[f"{sc.LLM_TOOLS}.{index}.{sc.TOOL_JSON_SCHEMA}"] = to_json(tool)
    attributes[sc.INPUT_VALUE] = to_json(compat.as_body(adapter_for(call.api).to_kwargs(call)))
    attributes[sc.INPUT_MIME_TYPE] = _JSON
    attributes[sc.OUTPUT_VALUE] = to_json(list(outputs))
    attributes[sc.OUTPUT_MIME_TYPE] = _JSON
    return attributes


def _messages(prefix: str, messages: Sequence[Mapping[str, Any]]) -> Attributes:
    """Semconv messages as flat `{prefix}.{i}.message.*` attributes; each tool result is a `tool` message."""
    attributes: Attributes = {}
    for index, (role, parts) in enumerate(_oi_messages(messages)):
        key = f"{prefix}.{index}."
        attributes[key + sc.MESSAGE_ROLE] = role
        texts = [str(part.get("content") or "") for part in parts if part.get("type") == "text"]
        if len(texts) == 1:
            attributes[key + sc.MESSAGE_CONTENT] = texts[0]
        for number, text in enumerate(texts if len(texts) > 1 else ()):
            attributes[f"{key}{sc.MESSAGE_CONTENTS}.{number}.{sc.MESSAGE_CONTENT_TYPE}"] = "text"
            attributes[f"{key}{sc.MESSAGE_CONTENTS}.{number}.{sc.MESSAGE_CONTENT_TEXT}"] = text
        calls = [part for part in parts if part.get("type") == "tool_call"]
        for number, part in enumerate(calls):
            call_key = f"{key}{sc.MESSAGE_TOOL_CALLS}.{number}."
            if part.get("id"):
                attributes[call_key + sc.TOOL_CALL_ID] = str(part["id"])
            attributes[call_key + sc.TOOL_CALL_FUNCTION_NAME] = str(part.get("name") or "")
            arguments = part.get("arguments")
            as_json = arguments if isinstance(arguments, str) else to_json(arguments)  # Anthropic's input is an object
            attributes[call_key + sc.TOOL_CALL_FUNCTION_ARGUMENTS] = as_json
        for part in parts:
            if part.get("type") == "tool_call_response" and part.get("id"):
                attributes[key + sc.MESSAGE_TOOL_CALL_ID] = str(part["id"])
    return attributes


def _oi_messages(messages: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, list[Mapping[str, Any]]]]:
    """(role, parts) per OpenInference message: a tool result is a message of its own, as OpenAI sends
    it (an Anthropic user turn of several results becomes several `tool` messages)."""
    for message in messages:
        parts = list(message.get("parts") or ())
        others = [part for part in parts if part.get("type") != "tool_call_response"]
        if others or len(others) == len(parts):
            yield str(message.get("role") or "user"), others
        for part in parts:
            if part.get("type") == "tool_call_response":
                response = part.get("response")
                text = response if isinstance(response, str) else to_json(response)
                yield _TOOL, [part, {"type": "text", "content": text}]
