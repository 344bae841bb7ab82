"""What a repeating unit of streamed text reads as: records (rows, log lines, code, JSON) or prose.

A model that loops says the same sentence again and again; an answer that lists twelve identical
JSON records, a table of identical rows, a log excerpt or unrolled code repeats on purpose. The loop
guard asks `is_structured` about a unit only once it already repeats back-to-back (rarely), so the
rules can be plain regular expressions.

A unit is structured when any of these holds:
- it carries a record delimiter, read cyclically: a brace or bracket, `|`, a lone `=` (`key=value`,
  not a rule of `====`), a tab after a field, a markup tag (`<td`, `</li`), or `,`/`;` directly
  followed by a non-space (`a,b,c`, not prose's `a, b`);
- under structured output (`response_format`, `text.format`, `output_config`/`output_format`): a
  quote, brace or bracket (a repeat that crosses JSON tokens: records, array items), or only JSON
  scalars and commas (`0, 0, 0`); a loop inside one JSON string has none and stays prose;
- it is whole lines (it holds a newline) and every non-blank line is a record line: indented
  (code, YAML, nested JSON), starting with a digit, `|`, `{`, `[` or `<`, a log level
  (`WARN ...`, `[ERROR] ...`), code (`f(`, `snake_case`, `->`, `::`, a URL, a `--flag`), ending with `,` or
  `;`, a `key: value` line, or a list item that is not a sentence (`- TBD`).
A unit of one repeated character (`}}}}`, `||||`) or of special tokens only (`<|im_end|>`, `</s>`,
`[PAD]`) is never structured: that is a model stuck, not a record. Everything else is prose,
including whole lines that are sentences (`I apologise.\\n`, `- Try
again.\\n`), so runaway prose is cut on the prose rule. Numbered lists and records whose fields
vary are not exact repeats, so they never reach this question.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sdk import compat

_RECORD_DELIMITER = re.compile(r"[{}\[\]|]|(?<!=)=(?!=)|\S\t|</?[A-Za-z!?]|[,;][^\s,;]")
_JSON_TOKEN = re.compile(r'["{}\[\]]')
_JSON_SCALARS = re.compile(r"(?:\s|[,:]|-?\d[\d.eE+-]*|true|false|null)*")
_LOG_LEVEL = re.compile(r"\[?(?:TRACE|DEBUG|INFO|NOTICE|WARN(?:ING)?|ERR(?:OR)?|FATAL|CRIT(?:ICAL)?)\b")
_CODE = re.compile(r"\w\(|[A-Za-z0-9]_[A-Za-z0-9]|->|=>|::|://|\s--?[A-Za-z]")
_KEY_VALUE = re.compile(r"[\w.-]+:(?:\s|$)")
_LIST_ITEM = re.compile(r"[-*+\u2022]\s")
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d)\]*_]*$")
_STRUCTURED_FORMATS = frozenset({"json_object", "json_schema"})
_SPECIAL_TOKENS = re.compile(r"(?:\s*(?:<\|?/?[\w.-]+\|?>|\[[A-Z_]+\]))+\s*")
_SPACE = frozenset(" \t\r\n")


def is_structured(unit: str, structured_output: bool = False) -> bool:
    """Whether `unit`, repeating back-to-back, reads as records rather than prose (see the module)."""
    opening = min((index for index in (unit.find("<"), unit.find("[")) if index >= 0), default=0)
    if len(set(unit) - _SPACE) <= 1 or _SPECIAL_TOKENS.fullmatch(unit[opening:] + unit[:opening]):
        return False  # "}}}}", "||||", "<|im_end|><|im_end|>": a model stuck, not a record
    cyclic = unit + unit
    if _RECORD_DELIMITER.search(cyclic):
        return True
    if structured_output and (_JSON_TOKEN.search(unit) or ("," in unit and _JSON_SCALARS.fullmatch(_after(unit, ",")))):
        return True
    if "\n" not in unit:
        return False
    lines = [line.strip("\r") for line in _after(unit, "\n").split("\n")[:-1]]
    filled = [line for line in lines if line.strip()]
    return bool(filled) and all(_is_record_line(line) for line in filled)


def _after(unit: str, mark: str) -> str:
    """The rotation of `unit` that starts just after its first `mark` (so it ends with one)."""
    start = unit.index(mark) + 1
    return unit[start:] + unit[:start]


def _is_record_line(line: str) -> bool:
    if line.startswith(("  ", "\t")):
        return True
    text = line.strip()
    if text[0] in "|{[<" or text[0].isdigit() or text[-1] in ",;":
        return True
    if _LOG_LEVEL.match(text) or _CODE.search(text):
        return True
    sentence = _SENTENCE_END.search(text) is not None
    return not sentence and (_KEY_VALUE.match(text) is not None or _LIST_ITEM.match(text) is not None)


def wants_structured_output(params: Mapping[str, Any]) -> bool:
    """Whether a call's native parameters ask for JSON output, in any API's words.

    Chat `response_format` (a json_object / json_schema dict, or a model class for `parse`),
    Responses `text.format` or `text_format`, Messages `output_config.format` or `output_format`,
    also when sent through `extra_body`.
    """
    for source in (params, compat.extra_body_of(params) or {}):
        text = source.get("text")
        config = source.get("output_config")
        candidates = (
            source.get("response_format"),
            source.get("text_format"),
            source.get("output_format"),
            text.get("format") if isinstance(text, Mapping) else None,
            config.get("format") if isinstance(config, Mapping) else None,
        )
        if any(_asks_for_json(value) for value in candidates):
            return True
    return False


def _asks_for_json(value: Any) -> bool:
    if isinstance(value, Mapping):
        return value.get("type") in _STRUCTURED_FORMATS
    return isinstance(value, type)  # a pydantic model / TypedDict given to `parse`
