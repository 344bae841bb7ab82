"""Nothing outside `sdk.compat` and the adapters names the client's private request (issue 56).

A send's request is read once into `sdk.compat.Request` and written back from it; the other modules
go through it and compat's helpers. So outside `sdk/compat.py` and `sdk/adapters/` no module holds,
as a string or as a name (an attribute, a variable, a parameter, a keyword argument), the clients'
transport keywords or their request option for the extra body, `FinalRequestOptions.json_data`, or
a `post_kwargs` dict; nor keys one of `post`'s own arguments by its name. Prose (docstrings,
comments, a change label that mentions `extra_body`) is not naming.
"""

from __future__ import annotations

import ast
from pathlib import Path

SDK = Path(__file__).resolve().parents[2] / "sdk"
ALLOWED = (SDK / "compat.py", SDK / "adapters")

PRIVATE_NAMES = frozenset({"extra_body", "extra_json", "extra_headers", "extra_query", "json_data", "post_kwargs"})
"""Banned as strings and as names."""
POST_ARGUMENTS = frozenset({"options", "cast_to", "stream_cls"})
"""`post`'s keyword arguments, banned as strings (a `post_kwargs`-style dict keyed by them)."""


def private_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each place `source` names the client's private request."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = node.value if node.value in PRIVATE_NAMES | POST_ARGUMENTS else None
        elif isinstance(node, ast.Attribute):
            named = node.attr
        elif isinstance(node, ast.Name):
            named = node.id
        elif isinstance(node, ast.arg):
            named = node.arg
        elif isinstance(node, ast.keyword):
            named = node.arg
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            named = node.name
        else:
            continue
        if named in PRIVATE_NAMES or (isinstance(node, ast.Constant) and named is not None):
            found.append((getattr(node, "lineno", 0), named))
    return found


def test_private_names_finds_each_way_of_naming_and_no_prose():
    source = '''
"""A docstring may say extra_body and `options`."""
def send(post_kwargs, **kwargs):  # a comment: extra_json
    options = post_kwargs.get("options") or {}
    extra = options.get("extra_json")
    client.create(extra_body=extra, timeout=1)
    return request.json_data, kwargs["cast_to"], {"stream_cls": None}, extra_headers
def extra_query(): ...
label = f"stop_merged:extra_body"
'''
    assert sorted(private_names(source)) == [
        (3, "post_kwargs"),
        (4, "options"),
        (4, "post_kwargs"),
        (5, "extra_json"),
        (6, "extra_body"),
        (7, "cast_to"),
        (7, "extra_headers"),
        (7, "json_data"),
        (7, "stream_cls"),
        (8, "extra_query"),
    ]


def test_nothing_outside_compat_and_the_adapters_names_the_clients_private_request():
    found = {
        f"{path.relative_to(SDK.parent)}:{line}": name
        for path in sorted(SDK.rglob("*.py"))
        if not any(path == allowed or allowed in path.parents for allowed in ALLOWED)
        for line, name in private_names(path.read_text())
    }
    assert not found, f"the client's private request named outside sdk.compat: {found}"


def test_compat_itself_names_them():
    """The allowed modules are where the names are: the checker reads the right tree."""
    named = {name for _, name in private_names((SDK / "compat.py").read_text())}
    assert named >= {"extra_json", "json_data", "options"}
