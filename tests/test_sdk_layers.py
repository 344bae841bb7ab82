"""No two `sdk` folders import each other (issue 56).

Each module maps to its folder (`sdk/cache/hints.py` to `cache`; a root module such as `sdk/wrap.py`
to itself). A pair is two folders each of which imports the other, through any of its modules, by
any import the source holds (`import_graph`: relative, nested and type-only ones included). What
composes several steps sits at the root above them (`sdk.pipeline`, `sdk.memories`, `sdk.prompt_builder`).
Vocabulary every step shares sits at the root, below the folders (`sdk.semconv`, `sdk.reasoning`,
`sdk.tokens`, the change names in `sdk.call`), so that no step imports another for a name.
"""

from __future__ import annotations

from tests.test_import_graph import folder_of, import_graph


def mutual_pairs(graph: dict[str, set[str]], folders: set[str]) -> set[frozenset[str]]:
    """The unordered pairs of distinct `folders` each of which imports the other, from a module graph."""
    edges = {
        (folder_of(source), folder_of(target))
        for source, targets in graph.items()
        for target in targets
        if folder_of(source) in folders and folder_of(target) in folders and folder_of(source) != folder_of(target)
    }
    return {frozenset(edge) for edge in edges if edge[::-1] in edges}


def sdk_pairs() -> set[frozenset[str]]:
    graph = import_graph("sdk")
    folders = {name for name in graph if name.count(".") == 1 and any(other.startswith(f"{name}.") for other in graph)}
    return {frozenset(name.removeprefix("sdk.") for name in pair) for pair in mutual_pairs(graph, folders)}


def test_mutual_pairs_finds_folders_that_import_each_other_and_only_those():
    graph = {
        "sdk.a.x": {"sdk.b.y"},
        "sdk.b.y": set(),
        "sdk.b.z": {"sdk.a"},
        "sdk.c.w": {"sdk.a.x", "sdk.root"},
        "sdk.root": {"sdk.c.w"},
        "sdk.a": set(),
    }
    assert mutual_pairs(graph, {"sdk.a", "sdk.b", "sdk.c"}) == {frozenset({"sdk.a", "sdk.b"})}
    assert folder_of("sdk.a") == "sdk.a" and folder_of("sdk.wrap") == "sdk.wrap"


def test_no_two_sdk_folders_import_each_other():
    assert sdk_pairs() == set()
