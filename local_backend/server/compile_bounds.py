"""What a JSON schema or a grammar may cost to compile, checked before llguidance (native code) sees it.

llguidance compiles recursively: a schema whose `$ref`s chain 3,000 definitions deep, or a GBNF
grammar of 5,000 chained rules, overflows its stack and the whole process dies (a segfault no
`except` catches). So each bound here is one llguidance's recursion follows, with the worst case at
the bound compiled by the tests (`test_server_compile_bounds`); each refusal is a 400 naming the field:

- A schema's depth is counted with every local `$ref` followed in place (`MAX_SCHEMA_DEPTH`): a
  chain of definitions is as deep as the same schemas written nested. A `$ref` back to one of its
  own ancestors (a recursive schema, such as a tree) is not followed again: llguidance expands it
  lazily, as the output grows.
- The schema as expanded (each `$ref` followed once per use) has at most `MAX_SCHEMA_NODES` values,
  which bounds this walk too: definitions that each use the next one twice would expand
  exponentially.
- The properties the request's schemas list together (`MAX_SCHEMA_PROPERTIES`): llguidance's compile
  time grows with the square of an object's properties.
- A grammar's text (`MAX_GRAMMAR_BYTES`), its rules (`MAX_GRAMMAR_RULES`) and its parentheses'
  nesting (`MAX_GRAMMAR_NESTING`), before the GBNF converter (Python, slower than linear in the rules;
  it recursed past Python's limit at 1,000 nested parentheses) reads it.

All walks are iterative: no depth of input recurses here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import unquote

from local_backend.server._constants import (
    MAX_GRAMMAR_BYTES,
    MAX_GRAMMAR_NESTING,
    MAX_GRAMMAR_RULES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    MAX_SCHEMA_PROPERTIES,
)
from local_backend.server.errors import ApiError

_RULE: Final = re.compile(r"::=|^\s*[?!]?[A-Za-z_][\w.-]*(?:\{[^}\n]*\})?\s*(?:\[[^\]\n]*\])?\s*(?:\.\d+)?\s*:", re.M)
"""A rule's definition: GBNF's `name ::=`, or a Lark line `name:` (`any_to_lark` reads Lark too)."""
_QUOTED: Final = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|\[(?:[^\]\\\n]|\\.)*\]|/(?:[^/\\\n]|\\.)+/')
"""A grammar's literals, character classes and regexes, whose parentheses are text, not nesting."""


def check_schemas(schemas: Iterable[tuple[Any, str]]) -> None:
    """400 naming the schema that nests past `MAX_SCHEMA_DEPTH` (its `$ref`s followed) or expands past
    `MAX_SCHEMA_NODES`, or at which the properties the schemas list together pass `MAX_SCHEMA_PROPERTIES`."""
    properties = 0
    for schema, param in schemas:
        nodes = 0
        stack: list[tuple[Any, int, tuple[str, ...]]] = [(schema, 1, ())]
        while stack:
            node, depth, followed = stack.pop()
            nodes += 1
            if depth > MAX_SCHEMA_DEPTH:
                raise ApiError(
                    f"{param} nests deeper than {MAX_SCHEMA_DEPTH} levels (each $ref followed in place)", param=param
                )
            if nodes > MAX_SCHEMA_NODES:
                raise ApiError(
                    f"{param} holds more than {MAX_SCHEMA_NODES} values once its $refs are followed", param=param
                )
            if isinstance(node, dict):
                listed = node.get("properties")
                if isinstance(listed, dict) and not followed:
                    properties += len(listed)
                    if properties > MAX_SCHEMA_PROPERTIES:
                        raise ApiError(
                            f"{param}: the request's schemas list more than {MAX_SCHEMA_PROPERTIES} properties",
                            param=param,
                        )
                stack.extend((item, depth + 1, followed) for item in node.values())
                ref = node.get("$ref")
                if isinstance(ref, str) and ref not in followed:
                    target = _local(schema, ref)
                    if target is not None:
                        stack.append((target, depth + 1, (*followed, ref)))
            elif isinstance(node, list):
                stack.extend((item, depth + 1, followed) for item in node)


def _local(root: Any, ref: str) -> Any:
    """The value a local `$ref` (`#/$defs/name`, a JSON pointer within `root`) names, or None."""
    if not ref.startswith("#"):
        return None
    node = root
    for part in unquote(ref[1:]).split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def check_grammar(text: str, param: str) -> None:
    """400 naming `param` when the grammar's text, rules or parenthesis nesting pass their bounds."""
    size = len(text.encode(errors="surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise ApiError(f"{param} is {size} bytes; at most {MAX_GRAMMAR_BYTES} are allowed", param=param)
    rules = len(_RULE.findall(text))
    if rules > MAX_GRAMMAR_RULES:
        raise ApiError(f"{param} defines {rules} rules; at most {MAX_GRAMMAR_RULES} are allowed", param=param)
    depth = deepest = 0
    for char in _QUOTED.sub("", text):
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    if deepest > MAX_GRAMMAR_NESTING:
        raise ApiError(
            f"{param} nests parentheses {deepest} deep; at most {MAX_GRAMMAR_NESTING} are allowed", param=param
        )
