"""Each endpoint's typed request: its body checked once, into a frozen value the route reads.

    bytes ──bounds.read_json──▶ body ──parse_<endpoint>──▶ <Endpoint>Request ──Sampling.params──▶ SamplingParams

A parser first holds the body to its endpoint's field table (`fields.check`: every field honoured,
inert or refused by name), then reads each field it honours once, a 400 naming the field for a bad
value: the history (`histories`), the tools (`tool_requests`), the sampling knobs (`sampling`), the
answer's constraint (llama.cpp's `grammar`; else a forced tool call; else, under `auto`, text or the
JSON its format field asks for, or calls of the offered tools; else that JSON; the format is not
read when a call is forced), how the chat template renders (vLLM's `add_generation_prompt`,
`continue_final_message`, `chat_template_kwargs`), `logit_bias`, the stream flag. What needs the engine is checked by
the route after: the model's name (`Backend.check_model`), the prompt against the context
(`tools.prompt_ids`, `Sampling.params`), the grammar (`constrained`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from local_backend.model.tool_prompt import Tool
from local_backend.server import fields
from local_backend.server._constants import MAX_CHOICES, MAX_TOP_LOGPROBS
from local_backend.server.constrained import ANY_OBJECT, Constraint
from local_backend.server.errors import ApiError
from local_backend.server.fields import optional, required, stop_strings
from local_backend.server.histories import anthropic_messages, openai_messages, responses_messages
from local_backend.server.logit_bias import LogitBias
from local_backend.server.sampling import Sampling
from local_backend.server.tool_requests import ToolChoice, anthropic_tools, openai_tools, responses_tools
from local_backend.server.tools import TemplateOptions

TEMPLATE_VARIABLES: Final = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now"}
)
"""What the server itself hands the chat template (see `TextTokenizer`): `chat_template_kwargs` may not replace it."""
OPENAI_MAX_TEMPERATURE: Final = 2.0
ANTHROPIC_MAX_TEMPERATURE: Final = 1.0
STREAM_OPTIONS: Final = frozenset({"include_usage", "include_obfuscation"})
"""The keys of Chat's and Completions' `stream_options` (the openai client's `ChatCompletionStreamOptionsParam`)."""

Body = Mapping[str, Any]
Messages = tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class OpenAIOptions:
    """What Chat and Completions requests share: the choices asked for and how they come back."""

    model: str | None
    sampling: Sampling
    n: int
    stream: bool
    include_usage: bool
    top_logprobs: int | None
    """Alternatives per token to report, or None for no logprobs at all."""
    logit_bias: LogitBias | None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """`POST /v1/chat/completions`."""

    options: OpenAIOptions
    messages: Messages
    tools: tuple[Tool, ...]
    tool_choice: ToolChoice
    constraint: Constraint | None
    parallel_tool_calls: bool
    template: TemplateOptions


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """`POST /v1/completions`: one prompt, as text or token ids."""

    options: OpenAIOptions
    prompt: str | tuple[int, ...]
    echo: bool
    constraint: Constraint | None


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """`POST /v1/responses`."""

    model: str | None
    messages: Messages
    tools: tuple[Tool, ...]
    tool_choice: ToolChoice
    sampling: Sampling
    constraint: Constraint | None
    stream: bool
    body: Body
    """The body as sent: the `Response` echoes its fields back as they came."""


@dataclass(frozen=True, slots=True)
class AnthropicPrompt:
    """What shapes an Anthropic prompt, the same for a message and its count: `POST
    /v1/messages/count_tokens`' whole request."""

    model: str
    messages: Messages
    tools: tuple[Tool, ...]
    tool_choice: ToolChoice


@dataclass(frozen=True, slots=True)
class MessageRequest:
    """`POST /v1/messages`."""

    prompt: AnthropicPrompt
    sampling: Sampling
    constraint: Constraint | None
    stream: bool


def parse_chat(body: Body, vocab_size: int) -> ChatRequest:
    fields.check(body, fields.CHAT, "POST /v1/chat/completions")
    messages = tuple(openai_messages(body.get("messages")))
    tools, choice = openai_tools(body)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    options = _openai_options(body, name, vocab_size, chat=True)
    parallel = optional(body, "parallel_tool_calls", bool, True)
    constraint = _grammar(body, tools_shown=bool(choice.shown(tools))) or _constraint(
        tools, choice, lambda: _chat_schema(body), parallel
    )
    return ChatRequest(options, messages, tuple(tools), choice, constraint, parallel, _template_options(body))


def parse_completion(body: Body, vocab_size: int) -> CompletionRequest:
    fields.check(body, fields.COMPLETIONS, "POST /v1/completions")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    token_ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if not (isinstance(prompt, str) or token_ids) or not prompt:
        raise ApiError(
            "prompt must be a non-empty string or a list of token ids (one prompt per request)", param="prompt"
        )
    options = _openai_options(body, "max_tokens", vocab_size, chat=False)
    echo = optional(body, "echo", bool, False)
    if echo and options.top_logprobs is not None:
        raise ApiError(
            "logprobs with echo needs the prompt's logprobs, which this backend does not compute", param="logprobs"
        )
    constraint = _grammar(body, tools_shown=False) or Constraint.json(*_json_schema(body))
    return CompletionRequest(options, prompt if isinstance(prompt, str) else tuple(prompt), echo, constraint)


def parse_responses(body: Body) -> ResponsesRequest:
    fields.check(body, fields.RESPONSES, "POST /v1/responses")
    model = optional(body, "model", str)
    optional(body, "metadata", dict)
    tools, choice = responses_tools(body)
    messages = tuple(responses_messages(body.get("input"), optional(body, "instructions", str)))
    sampling = Sampling.parse(
        body,
        max_tokens=optional(body, "max_output_tokens", int),
        max_tokens_param="max_output_tokens",
        stop=(),
        max_temperature=OPENAI_MAX_TEMPERATURE,
    )
    constraint = _constraint(tools, choice, lambda: (_text_schema(body.get("text")), "text.format"))
    return ResponsesRequest(model, messages, tuple(tools), choice, sampling, constraint, _stream(body), body)


def parse_count_tokens(body: Body) -> AnthropicPrompt:
    fields.check(body, fields.COUNT_TOKENS, "POST /v1/messages/count_tokens")
    return _anthropic_prompt(body)


def parse_message(body: Body) -> MessageRequest:
    fields.check(body, fields.MESSAGES, "POST /v1/messages")
    prompt = _anthropic_prompt(body)
    sampling = Sampling.parse(
        body,
        max_tokens=required(body, "max_tokens", int),
        max_tokens_param="max_tokens",
        stop=stop_strings(body, "stop_sequences"),
        max_temperature=ANTHROPIC_MAX_TEMPERATURE,
    )
    constraint = _constraint(prompt.tools, prompt.tool_choice, lambda: (_output_schema(body), "output_config.format"))
    return MessageRequest(prompt, sampling, constraint, _stream(body))


def _template_options(body: Body) -> TemplateOptions:
    """vLLM's Chat extras for the template: continuing the final message implies no new turn, and
    asking for both is refused as vLLM refuses it; `chat_template_kwargs` may not set what the
    server renders itself."""
    continued = optional(body, "continue_final_message", bool, False)
    opening = optional(body, "add_generation_prompt", bool, not continued)
    if continued and opening:
        raise ApiError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    kwargs = optional(body, "chat_template_kwargs", dict, {})
    taken = sorted(set(kwargs) & TEMPLATE_VARIABLES)
    if taken:
        raise ApiError(
            f"chat_template_kwargs must not set {taken[0]!r}: the server renders it from the request",
            param="chat_template_kwargs",
        )
    return TemplateOptions(opening, continued, kwargs)


def _openai_options(body: Body, max_tokens_param: str, vocab_size: int, *, chat: bool) -> OpenAIOptions:
    n = optional(body, "n", int, 1)
    if not 1 <= n <= MAX_CHOICES:
        raise ApiError(f"n={n} must be between 1 and {MAX_CHOICES}", param="n")
    sampling = Sampling.parse(
        body,
        max_tokens=optional(body, max_tokens_param, int),
        max_tokens_param=max_tokens_param,
        stop=stop_strings(body, "stop"),
        max_temperature=OPENAI_MAX_TEMPERATURE,
    )
    include_usage = _include_usage(optional(body, "stream_options", dict, {}))
    top = _top_logprobs(body, chat)
    bias = LogitBias.parse(body.get("logit_bias"), vocab_size)
    return OpenAIOptions(optional(body, "model", str), sampling, n, _stream(body), include_usage, top, bias)


def _include_usage(options: dict[str, Any]) -> bool:
    """`stream_options.include_usage`; any other key is refused by name (`include_obfuscation` only as
    false: this server pads no chunk)."""
    unknown = sorted(set(options) - STREAM_OPTIONS)
    if unknown:
        raise ApiError(
            f"stream_options: the key {fields.short(unknown[0])} is not supported (known: {sorted(STREAM_OPTIONS)})",
            param="stream_options",
        )
    if options.get("include_obfuscation") not in (None, False):
        raise ApiError(
            "stream_options.include_obfuscation is not supported by the kvwise local backend (accepted: false)",
            param="stream_options",
        )
    usage = fields.optional(options, "include_usage", bool, False)
    return bool(usage)


def _anthropic_prompt(body: Body) -> AnthropicPrompt:
    model = required(body, "model", str)
    messages = tuple(anthropic_messages(body.get("messages"), body.get("system")))
    tools, choice = anthropic_tools(body)
    return AnthropicPrompt(model, messages, tuple(tools), choice)


def _stream(body: Body) -> bool:
    stream: bool = optional(body, "stream", bool, False)
    return stream


def _constraint(
    tools: Sequence[Tool],
    choice: ToolChoice,
    schema: Callable[[], tuple[dict[str, Any] | None, str]],
    parallel: bool = True,
) -> Constraint | None:
    """A call of the forced tools; under `auto` text (or the JSON schema `schema()` gives, with the
    field that asked for it) or calls of the offered tools only; else that JSON; else none. The
    format is read only when no call is forced: a forced call is the whole answer."""
    if choice.forced:
        return Constraint("tool_choice", tools=choice.forced_tools(tools))
    answer, param = schema()
    if choice.mode == "auto":
        return Constraint(
            param if answer is not None else "tools",
            tools=tuple(tools),
            schema=answer,
            calls_optional=True,
            parallel=parallel,
        )
    return Constraint.json(answer, param)


def _grammar(body: Body, tools_shown: bool) -> Constraint | None:
    """llama.cpp's `grammar` (GBNF): the whole answer's shape, so it goes with no other constraint."""
    text = body.get("grammar")
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise ApiError(f"grammar must be a non-empty GBNF string, got {fields.short(text)}", param="grammar")
    for other in ("json_schema", "response_format"):
        if body.get(other) is not None:
            raise ApiError(f"grammar and {other} both constrain the answer: send one", param="grammar")
    if tools_shown:
        raise ApiError("grammar cannot be combined with tools (set tool_choice to none, or drop one)", param="grammar")
    return Constraint.gbnf(text, "grammar")


def _json_schema(body: Body) -> tuple[dict[str, Any] | None, str]:
    """llama.cpp's `json_schema`: an object, the schema the answer's JSON is valid against."""
    schema = body.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise ApiError(f"json_schema must be a JSON schema object, got {fields.short(schema)}", param="json_schema")
    return schema, "json_schema"


def _chat_schema(body: Body) -> tuple[dict[str, Any] | None, str]:
    """The JSON schema a Chat answer is held to: llama.cpp's `json_schema`, or `response_format`'s."""
    if body.get("json_schema") is None:
        return response_schema(body.get("response_format"), "response_format"), "response_format"
    if body.get("response_format") is not None:
        raise ApiError("json_schema and response_format both constrain the answer: send one", param="json_schema")
    return _json_schema(body)


def _top_logprobs(body: Body, chat: bool) -> int | None:
    """How many top alternatives a request wants per token, or None when it wants no logprobs.

    Chat: `logprobs: true` and `top_logprobs` 0..MAX (only with `logprobs`); legacy Completions:
    `logprobs` 0..MAX is the count itself.
    """
    if chat:
        wanted = optional(body, "logprobs", bool, False)
        top = optional(body, "top_logprobs", int)
        if top is not None and not wanted:
            raise ApiError("top_logprobs needs logprobs: true", param="top_logprobs")
        name, top = "top_logprobs", (top or 0) if wanted else None
    else:
        name, top = "logprobs", optional(body, "logprobs", int)
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ApiError(f"{name}={top} must be between 0 and {MAX_TOP_LOGPROBS}", param=name)
    return top


def response_schema(value: Any, param: str) -> dict[str, Any] | None:
    """The JSON schema Chat's `response_format` asks for (`json_object`: any object), or None for text."""
    if value is None or value == {"type": "text"}:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":
        return dict(ANY_OBJECT)
    spec = value.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise ApiError(f"{param} must be text, json_object or json_schema with a schema object", param=param)
    return spec.get("schema") or dict(ANY_OBJECT)


def _text_schema(text: Any) -> dict[str, Any] | None:
    """The JSON schema the Responses `text.format` asks for (`json_object`: any object), or None for text."""
    if text is None:
        return None
    if not isinstance(text, dict) or set(text) - {"format"}:
        raise ApiError("text supports only format (text, json_object or json_schema)", param="text")
    form = text.get("format") or {"type": "text"}
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return dict(ANY_OBJECT)
    if kind == "json_schema" and isinstance(form.get("schema"), dict):
        schema: dict[str, Any] = form["schema"]
        return schema
    raise ApiError("text.format must be text, json_object or json_schema with a schema", param="text")


def _output_schema(body: Body) -> dict[str, Any] | None:
    """The JSON schema of Anthropic's `output_config.format` (structured outputs); its `effort` is refused."""
    config = optional(body, "output_config", dict, {})
    unknown = set(config) - {"format"}
    if unknown:
        raise ApiError(
            f"output_config.{sorted(unknown)[0]} is not supported by the kvwise local backend", param="output_config"
        )
    form = config.get("format")
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") != "json_schema" or not isinstance(form.get("schema"), dict):
        raise ApiError("output_config.format must be {'type': 'json_schema', 'schema': {...}}", param="output_config")
    schema: dict[str, Any] = form["schema"]
    return schema
