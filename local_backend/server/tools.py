"""Tool calling in the Hermes format: tools into the prompt, `<tool_call>` blocks out of the answer.

The model is shown its tools and asked to answer a call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(the format of Hermes and Qwen 2.5+, which vLLM's `hermes` parser reads). A chat template that
renders `tools` itself gets them, with the history's calls and results in OpenAI's message shape;
one that does not (the bundled model's) gets them folded into the turns it knows by
`local_backend.model.tool_prompt.fold`, the same function that writes the bundled model's training text.

`ToolCallParser` reads the answer as it streams: text outside the blocks is content (a possible
start of `<tool_call>` is held back), and inside one the name is known as soon as it is complete
and the arguments stream as raw JSON text, holding back only what could still be the block's
closing brace. The arguments' text is the same streamed or not.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_backend.model.tokenizer import TextTokenizer
from local_backend.model.tool_prompt import TOOL_CALL_END, TOOL_CALL_START, Tool, fold
from local_backend.server.bounds import check_counted_size, check_prompt_size
from local_backend.server.errors import ApiError

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments' JSON text, as the model wrote it (the same streamed or not)."""


def new_call_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


@dataclass(frozen=True, slots=True)
class TemplateOptions:
    """How the chat template renders a prompt (vLLM's Chat extras): with the assistant's opening
    (`add_generation_prompt`), or with the final message left open for the model to continue
    (`continue_final_message`), and with more template variables (`kwargs`, `chat_template_kwargs`)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def prompt_ids(
    tokenizer: TextTokenizer,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[Tool],
    max_model_len: int | None = None,
    template: TemplateOptions = TemplateOptions(),
) -> list[int]:
    """The prompt of OpenAI-shaped `messages` (tool calls and `tool` results included) and `tools`.

    A template that renders tools gets both as they are (arguments as objects, as Hugging Face
    templates expect); any other gets them folded into system, user and assistant text. Text that
    cannot fit `max_model_len` is refused before anything renders (`bounds.check_prompt_size`);
    None (a token count, whose prompt need not fit) renders up to `MAX_COUNTED_BYTES` of text
    (`bounds.check_counted_size`).
    """
    if max_model_len is not None:
        texts = _texts(messages, tools, folded=not tokenizer.renders_tools)
        check_prompt_size(texts, tokenizer.max_bytes_per_token, max_model_len, "messages")
    else:
        check_counted_size(_texts(messages, tools, folded=True), "messages")
    if template.continue_final_message and not (messages[-1]["content"] or "").strip():
        raise ApiError(
            "continue_final_message needs a final message with text to continue", param="continue_final_message"
        )
    if tokenizer.renders_tools:
        turns, listed = _for_template(messages), [t.as_openai() for t in tools] or None
    else:
        turns, listed = fold(messages, tools), None
    try:
        return tokenizer.chat_prompt(
            turns, template.add_generation_prompt, listed, template.continue_final_message, template.kwargs
        )
    except ValueError as exc:  # the template refused the turns
        raise ApiError(str(exc), param="messages") from None


def _texts(messages: Sequence[dict[str, Any]], tools: Sequence[Tool], folded: bool) -> Iterator[str]:
    """Text the rendered prompt holds verbatim: each turn's content, and when `fold` renders them
    (not a template of the checkpoint's own, which may reformat or leave out what it likes), the
    calls' arguments and each tool's JSON."""
    for message in messages:
        yield message["content"] or ""  # an assistant turn of tool calls alone has none
        if folded:
            yield from (call["function"]["arguments"] for call in message.get("tool_calls") or ())
    if folded:
        yield from (json.dumps(tool.as_openai(), ensure_ascii=False) for tool in tools)


def _for_template(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            calls = [
                {**c, "function": {**c["function"], "arguments": _as_object(c["function"]["arguments"])}} for c in calls
            ]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def _as_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsPiece:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int


Event = TextPiece | ToolCallStart | ArgumentsPiece | ToolCallEnd


class ToolCallParser:
    """Answer text in, content and tool-call events out, as the text streams (see the module doc)."""

    def __init__(self, id_prefix: str):
        self._prefix = id_prefix
        self._buffer = ""
        self._in_call = False
        self._head_done = False
        self._sent = 0  # characters of the current call's arguments already sent
        self._strip = False  # after a call: the blank lines before what follows are dropped
        self.calls: list[ToolCall] = []
        self._content: list[str] = []

    @property
    def content(self) -> str:
        return "".join(self._content)

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while self._step(events, final=False):
            pass
        return events

    def finish(self) -> list[Event]:
        """The rest at the answer's end: held-back text, and an unterminated call if it parses."""
        events: list[Event] = []
        while self._step(events, final=True):
            pass
        return events

    def _step(self, events: list[Event], final: bool) -> bool:
        """Consume what can be decided now; True when the buffer changed state and may hold more."""
        if not self._in_call:
            if self._strip:
                self._buffer = self._buffer.lstrip()
                self._strip = not self._buffer
            start = self._buffer.find(TOOL_CALL_START)
            if start < 0:  # hold back a possible start of the tag, and trailing space (dropped before a tag)
                partial = _partial_suffix(self._buffer, TOOL_CALL_START)
                before = self._buffer[: len(self._buffer) - partial]
                keep = 0 if final else partial + len(before) - len(before.rstrip())
                self._text(events, self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return False
            self._text(events, self._buffer[:start].rstrip())
            self._buffer = self._buffer[start + len(TOOL_CALL_START) :]
            self._in_call, self._head_done, self._sent = True, False, 0
            return True
        end = self._buffer.find(TOOL_CALL_END)
        body = self._buffer if end < 0 else self._buffer[:end]
        if not self._head_done:
            head = _HEAD.match(body)
            if head is not None and head.end() == len(body) and end < 0 and not final:
                return False  # the space before the arguments may still be coming
            if head is None:
                if end < 0 and not final:
                    return False
                return self._unparsed(events, body, end)
            self._start(events, json.loads(f'"{head.group(1)}"'))
            self._buffer = self._buffer[head.end() :]
            return True
        if end < 0 and not final:
            cut = len(body) - _partial_suffix(body, TOOL_CALL_END)
            brace = body.rfind("}", 0, cut)
            ready = body[: brace if brace >= 0 else cut].rstrip()
            self._arguments(events, ready)
            return False
        brace = body.rfind("}")
        arguments = body[: brace if brace >= 0 else len(body)].rstrip()
        self._arguments(events, arguments)
        index = len(self.calls) - 1
        self.calls[index] = ToolCall(self.calls[index].id, self.calls[index].name, arguments)
        events.append(ToolCallEnd(index))
        self._buffer = "" if end < 0 else self._buffer[end + len(TOOL_CALL_END) :]
        self._in_call, self._strip = False, True
        return end >= 0

    def _unparsed(self, events: list[Event], body: str, end: int) -> bool:
        """A block whose head is not `{"name": ..., "arguments": ...`: a call if it is such JSON, else text."""
        try:
            value = json.loads(body)
            name, arguments = value["name"], json.dumps(value.get("arguments", {}), ensure_ascii=False)
        except (ValueError, KeyError, TypeError):
            self._text(events, TOOL_CALL_START + body + (TOOL_CALL_END if end >= 0 else ""))
        else:
            self._start(events, str(name))
            self._arguments(events, arguments)
            self.calls[-1] = ToolCall(self.calls[-1].id, self.calls[-1].name, arguments)
            events.append(ToolCallEnd(len(self.calls) - 1))
        self._buffer = "" if end < 0 else self._buffer[end + len(TOOL_CALL_END) :]
        self._in_call, self._strip = False, True
        return end >= 0

    def _text(self, events: list[Event], text: str) -> None:
        if text:
            self._content.append(text)
            events.append(TextPiece(text))

    def _start(self, events: list[Event], name: str) -> None:
        self.calls.append(ToolCall(new_call_id(self._prefix), name, ""))
        self._head_done = True
        events.append(ToolCallStart(len(self.calls) - 1, self.calls[-1].id, name))

    def _arguments(self, events: list[Event], ready: str) -> None:
        if len(ready) > self._sent:
            events.append(ArgumentsPiece(len(self.calls) - 1, ready[self._sent :]))
            self._sent = len(ready)


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag` (held back: it may become it)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0
