"""The wrapped client as an object: a proxy of the live client (or of a resource on the way to an
intercepted one) that is transparent to attribute set, get and delete, `vars()`, and a test's patch
and its undoing.

`Node` gives the live object's attributes as they are, except the names its root (`sdk.wrap`'s
`WrappedClient`) makes its own objects for (`_made`). What it made for a name is made again
whenever the live object's attribute is no longer the one it was made from, so an assignment (or a
test's patch) is honoured; setting a name back to what the proxy gave for it (`monkeypatch` and
`mock.patch` undoing) sets back the live object's own, so nothing of kvwise's lands on the client.
"""

from __future__ import annotations

import types
from typing import Any, Self

Path = tuple[str, ...]


class Node:
    """A proxy of `target` at attribute path `path` from the client; `root` makes what it intercepts."""

    __slots__ = ("_target", "_path", "_root", "_children")

    @classmethod
    def of(cls, target: Any, path: Path, root: Any = None) -> Self:
        """The proxy of `target` (made without `__init__`, which is the live object's: below)."""
        node = object.__new__(cls)
        object.__setattr__(node, "_target", target)
        object.__setattr__(node, "_path", path)
        object.__setattr__(node, "_root", root if root is not None else node)
        object.__setattr__(node, "_children", {})
        return node

    @property
    def __init__(self) -> Any:  # type: ignore[misc]  # `inspect.signature(client.__init__)`: the client's
        return self._target.__init__

    def __getattr__(self, name: str) -> Any:
        current = getattr(self._target, name)
        children: dict[str, tuple[Any, Any]] = self._children
        made = children.get(name)
        if made is not None and _same(made[1], current):
            return made[0]
        value = self._root._made(self, name, current)
        if value is not current:
            children[name] = (value, current)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        made = self._children.get(name)
        if made is not None and value is made[0]:  # what the proxy gave, set back: the live object's own
            value = made[1]
        setattr(self._target, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._target, name)
        self._children.pop(name, None)

    def __dir__(self) -> list[str]:
        return dir(self._target)

    def __repr__(self) -> str:
        return f"<kvwise {self._target!r}>"


def _same(made_from: Any, current: Any) -> bool:
    """Whether the client's attribute is still the object kvwise's was made from (a bound method is
    made anew at each read: the same function of the same client)."""
    return made_from is current or (
        type(current) is types.MethodType and type(made_from) is types.MethodType and made_from == current
    )
