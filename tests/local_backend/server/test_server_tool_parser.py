"""The Hermes tool-call parser and the tools' prompt: table-driven, whole and fed in random pieces."""

from __future__ import annotations

import json
import random

import pytest

from local_backend.model.tokenizer import TextTokenizer
from local_backend.model.tool_prompt import Tool, call_text
from local_backend.server.tools import ArgumentsPiece, TextPiece, ToolCallParser, ToolCallStart, prompt_ids

CASES = [
    ("plain text", "Hello there", "Hello there", []),
    (
        "text then a call",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": {"a": 1}}}\n</tool_call>\n',
        "Sure.",
        [("get_weather", '{"city": "Paris", "n": {"a": 1}}')],
    ),
    (
        "two calls, a brace in a string",
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": {"k": "}"}}</tool_call>',
        "",
        [("a", "{}"), ("b", '{"k": "}"}')],
    ),
    (
        "arguments before the name",
        '<tool_call>\n{"arguments": {"x": 1}, "name": "f"}\n</tool_call>',
        "",
        [("f", '{"x": 1}')],
    ),
    (
        "not JSON stays text",
        "<tool_call>\nnot json\n</tool_call> after",
        "<tool_call>\nnot json\n</tool_call>after",
        [],
    ),
    ("a call cut by the token cap", 'text <tool_call>{"name": "a", "arguments": {"q": 1', "text", [("a", '{"q": 1')]),
    ("a lone less-than sign", "1 < 2 and <tool", "1 < 2 and <tool", []),
]


def _run(text: str, sizes: random.Random | None) -> tuple[ToolCallParser, list]:
    parser, events, i = ToolCallParser("call_"), [], 0
    while i < len(text):
        j = len(text) if sizes is None else i + sizes.randint(1, 5)
        events += parser.feed(text[i:j])
        i = j
    return parser, events + parser.finish()


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES, ids=[c[0] for c in CASES])
def test_content_and_calls_are_the_same_whole_or_in_pieces(name, text, content, calls):
    for seed in [None, *range(30)]:
        parser, events = _run(text, None if seed is None else random.Random(seed))
        assert parser.content == content == "".join(e.text for e in events if isinstance(e, TextPiece))
        assert [(c.name, c.arguments) for c in parser.calls] == calls
        assert [e.name for e in events if isinstance(e, ToolCallStart)] == [name for name, _ in calls]
        for index, (_, arguments) in enumerate(calls):
            assert "".join(e.text for e in events if isinstance(e, ArgumentsPiece) and e.index == index) == arguments


def test_a_call_as_the_model_is_asked_to_write_it_parses_back():
    parser, _ = _run(call_text("f", {"x": [1, 2]}), None)
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [("f", {"x": [1, 2]})]


def test_a_template_without_tools_gets_them_folded_into_its_turns(llama_dir):
    tokenizer = TextTokenizer.from_dir(llama_dir)
    assert not tokenizer.renders_tools
    tool = Tool("get_weather", "Weather of a city", {"type": "object", "properties": {"city": {"type": "string"}}})
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    text = tokenizer.decode(prompt_ids(tokenizer, messages, [tool]))
    assert '"name": "get_weather"' in text and "<tools>" in text
    past_call = call_text("get_weather", '{"city": "Paris"}')
    assert "<tool_response>\nsunny\n</tool_response>" in text
    assert text.index("<tools>") < text.index("Weather?") < text.index(past_call) < text.index("sunny")


HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{{ {'name': c['function']['name'],"
    " 'arguments': c['function']['arguments']} | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_renders_tools_gets_them_and_the_calls_arguments_as_objects(llama_dir):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))
    tokenizer = TextTokenizer(raw, {"bos_token": "<s>", "eos_token": "</s>"}, HERMES_TEMPLATE)
    assert tokenizer.renders_tools
    tool = Tool("f", None, {"type": "object"})
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]
    text = tokenizer.decode(prompt_ids(tokenizer, messages, [tool]))
    assert json.dumps(tool.as_openai()) in text
    assert '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>' in text  # an object, not a string
    assert "tool\ndone" in text and "# Tools" not in text  # the template's own rendering, nothing folded in
