"""A chat template's render, bounded: time, loop iterations, string sizes, output, recursion.

The template is the model file's (or `--chat-template`'s) code, run on every request. Jinja's
sandbox stops attribute escapes, but not work: nested `range(100000)` loops pinned a worker thread
forever (a thread cannot be killed), `range(10**9)|list`, recursion, a string doubled 40 times or
10 GB of output gave 500s, and a 3 GB constant was allocated at start-up (Jinja folds constant
expressions when it compiles). Here every bound is checked inside the render, at the points where
work happens, so a render that passes one stops there and frees its worker:

- each `for` loop's iterable is wrapped (the template's syntax tree is rewritten) so every
  iteration counts against `TEMPLATE_MAX_ITERATIONS` and checks the deadline
  (`TEMPLATE_RENDER_SECONDS`); so does every call, filter and output;
- `*`, `**`, `+` and `%` on text or lists, `~`, the filters and the string methods that build text
  (`center`, `join`, `replace`, `format`, ...) are checked before they allocate: no string or list
  the render builds may pass `TEMPLATE_MAX_CHARS`, nor may all its output together;
- what every operator, call, filter, slice and `~` returns is weighed (`sys.getsizeof`; a call's or
  filter's list with its items, which `split` or `list` make new) and counted against
  `TEMPLATE_MAX_BUILT_BYTES` for the whole render: strings each within the bound, kept in a growing
  list or dict, no longer take the machine's memory; a split's pieces are counted before it
  allocates them, and a filter that takes in a whole generator or string (`list`, `sort`, `join`,
  ...) counts each item as a loop iteration (the count is of what is built, freed or not: a
  template that rebuilds a list with `+` for each of thousands of messages pays for every copy);
- nothing is folded at compile time (every filter is context-bound, the operators intercepted).

A render that passes a bound raises `TemplateBoundError` naming it (the request's 400; at
start-up, a probe render's refusal), any other failure of the template a `ValueError`.

    env = BoundedEnvironment()
    text = render(env.from_string(source), {"messages": messages, "add_generation_prompt": True})
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg, pass_context
from jinja2.visitor import NodeTransformer

from local_backend._constants import (
    TEMPLATE_MAX_BUILT_BYTES,
    TEMPLATE_MAX_CHARS,
    TEMPLATE_MAX_ITERATIONS,
    TEMPLATE_MAX_POWER_BITS,
    TEMPLATE_RENDER_SECONDS,
)

_WIDTH = re.compile(r"%[-#0 +]*(\d+|\*)|\{[^{}]*?:[^{}]*?(\d+)[^{}]*\}")
"""Widths in `%` and `str.format` specs (`%99999999d`, `{:>99999999}`)."""


class TemplateBoundError(ValueError):
    """A render passed one of its bounds; `bound` names it (`time`, `iterations`, `size`, `recursion`)."""

    def __init__(self, bound: str, message: str):
        super().__init__(f"the chat template passed its {bound} bound: {message}")
        self.bound = bound


@dataclass(slots=True)
class _Budget:
    """One render's spending: its deadline, iterations, output and the bytes it built so far."""

    deadline: float
    iterations: int = 0
    output: int = 0
    built: int = 0

    def tick(self) -> None:
        self.iterations += 1
        if self.iterations > TEMPLATE_MAX_ITERATIONS:
            raise TemplateBoundError("iterations", f"more than {TEMPLATE_MAX_ITERATIONS} loop iterations")
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateBoundError("time", f"the render took more than {TEMPLATE_RENDER_SECONDS:g} s")

    def produce(self, chars: int) -> None:
        self.output += chars
        if self.output > TEMPLATE_MAX_CHARS:
            raise TemplateBoundError("size", f"its output passed {TEMPLATE_MAX_CHARS} characters")

    def build(self, size: int) -> None:
        self.built += size
        if self.built > TEMPLATE_MAX_BUILT_BYTES:
            raise TemplateBoundError("size", f"it built more than {TEMPLATE_MAX_BUILT_BYTES} bytes of text and lists")

    def afford(self, size: int, what: str) -> None:
        if self.built + size > TEMPLATE_MAX_BUILT_BYTES:
            raise TemplateBoundError(
                "size", f"{what} would build {size} bytes, past the {TEMPLATE_MAX_BUILT_BYTES} a render may build"
            )


_BUDGET: Final[contextvars.ContextVar[_Budget | None]] = contextvars.ContextVar("kvwise_template_budget", default=None)


def _spend() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # compiled or called outside `render` (a constant folded at start-up): no work allowed
        raise TemplateBoundError("time", "the template computed outside a render")
    return budget


def _fits(chars: float, what: str) -> None:
    if chars > TEMPLATE_MAX_CHARS:
        raise TemplateBoundError("size", f"{what} would make {chars:.0f} characters, past {TEMPLATE_MAX_CHARS}")


_PIECE_BYTES: Final = sys.getsizeof("") + 8
"""Bytes each piece a split makes costs beyond its text: an empty string and its list slot."""

_LINE_BREAKS: Final = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""Where `str.splitlines` splits."""

_CONSUMING_FILTERS: Final = frozenset({"list", "sort", "join", "slice", "batch", "groupby"})
"""Filters that take in a whole iterable (a generator's items, a string's characters): each item is a loop
iteration, so one filter call cannot make millions of objects before its result is weighed."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


def _built(value: Any, new_items: bool = False) -> Any:
    """`value`, a render's product, weighed against its `TEMPLATE_MAX_BUILT_BYTES` (`new_items`: a list's
    or tuple's items too, one level, as `split` and `list` make them); outside a render, or not text or a
    collection, as it is."""
    budget = _BUDGET.get()
    if budget is not None and isinstance(value, (str, list, tuple, dict)):
        size = sys.getsizeof(value)
        if new_items and isinstance(value, (list, tuple)):
            size += sum(map(sys.getsizeof, value))
        budget.build(size)
    return value


def _widths(spec: str) -> int:
    return max((int(w) for m in _WIDTH.finditer(spec) for w in m.groups() if w and w != "*"), default=0)


class _Bounded(NodeTransformer):
    """Routes every `for` loop's iterable, every slice and every `~` through the environment's bounded versions."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(
            nodes.EnvironmentAttribute("bounded_iter", lineno=node.lineno),
            [node.iter],
            [],
            None,
            None,
            lineno=node.lineno,
        )
        return node

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        """A slice (Jinja's code takes it directly, past the environment's `getitem`): a copy, weighed."""
        self.generic_visit(node)
        if not isinstance(node.arg, nodes.Slice):
            return node
        bounds = [
            part or nodes.Const(None, lineno=node.lineno) for part in (node.arg.start, node.arg.stop, node.arg.step)
        ]
        return nodes.Call(
            nodes.EnvironmentAttribute("bounded_slice", lineno=node.lineno),
            [node.node, *bounds],
            [],
            None,
            None,
            lineno=node.lineno,
        )

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            nodes.EnvironmentAttribute("bounded_concat", lineno=node.lineno),
            list(node.nodes),
            [],
            None,
            None,
            lineno=node.lineno,
        )


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of the module doc, and transformers' chat-template
    helpers (`tojson` without ASCII escapes, `raise_exception`, `strftime_now`)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, optimized=False, finalize=_finalize)
        self.filters["tojson"] = _tojson
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.globals.pop("lipsum", None)
        for name, check in _FILTER_CHECKS.items():
            if name in self.filters:
                self.filters[name] = _checked(self.filters[name], check)
        self.filters = {name: _unfoldable(f, name in _CONSUMING_FILTERS) for name, f in self.filters.items()}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        bounded = _Bounded().visit(tree)
        assert isinstance(bounded, nodes.Template)
        return bounded

    def concat(self, pieces: Iterable[str]) -> str:  # a macro's or `{% set %}` block's text
        pieces = list(pieces)
        _fits(sum(map(len, pieces)), "a block")
        return _built("".join(pieces))

    def bounded_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        return _ticking(iterable)

    def bounded_concat(self, *values: Any) -> str:
        texts = [str(value) for value in values]
        _fits(sum(map(len, texts)), "`~`")
        return _built("".join(texts))

    def bounded_slice(self, obj: Any, start: Any, stop: Any, step: Any) -> Any:
        _spend().check_time()
        return _built(obj[start:stop:step])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _spend().check_time()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if _size(seq) and isinstance(times, int):
                    _fits(_size(seq) * times, "`*`")
        elif operator == "+":
            _fits(_size(left) + _size(right), "`+`")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right * math.log2(abs(left)) > TEMPLATE_MAX_POWER_BITS:
                raise TemplateBoundError("size", f"`**` would make an integer past {TEMPLATE_MAX_POWER_BITS} bits")
        elif operator == "%" and isinstance(left, str):
            args = right if isinstance(right, tuple) else (right,)
            widths = [a for a in args if isinstance(a, int)] if "*" in left else []
            _fits(len(left) + sum(len(str(a)) for a in args) + max([_widths(left), *widths]), "`%`")
        return _built(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's names)
        _spend().check_time()
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps `str.format` in a function of its own
        receiver = getattr(method, "__self__", None)
        if isinstance(receiver, str):
            name = getattr(method, "__name__", "")
            if name == "join" and args:  # a view or iterator: counted as a list
                args = (list(args[0]), *args[1:])
            _check_str_method(receiver, name, args, kwargs)
        return _built(super().call(__context, __obj, *args, **kwargs), new_items=True)


def render(template: Any, variables: Mapping[str, Any]) -> str:
    """The text `template` (of a `BoundedEnvironment`) renders from `variables`, within the bounds."""
    budget = _Budget(time.monotonic() + TEMPLATE_RENDER_SECONDS)
    token = _BUDGET.set(budget)
    try:
        pieces = []
        for piece in template.generate(**variables):
            budget.produce(len(piece))
            budget.check_time()
            pieces.append(piece)
        return "".join(pieces)
    except TemplateBoundError:
        raise
    except RecursionError:
        raise TemplateBoundError("recursion", "it called itself past Python's recursion limit") from None
    except MemoryError:
        raise TemplateBoundError("size", "it ran out of memory") from None
    except OverflowError as exc:  # the sandbox's `range` past 100,000 items
        raise TemplateBoundError("size", str(exc)) from None
    except TemplateError as exc:
        raise ValueError(f"chat template failed: {exc}") from exc
    except Exception as exc:  # the template's operation on a caller's value (TypeError, KeyError, ...)
        raise ValueError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _BUDGET.reset(token)


def _ticking(iterable: Iterable[Any]) -> Iterator[Any]:
    """`iterable`'s items, each a loop iteration of the render."""
    budget = _spend()
    for item in iterable:
        budget.tick()
        yield item


def _pieces(text: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """How many pieces `text.split`, `rsplit` or `splitlines` with these arguments makes, at most."""
    if name == "splitlines":
        return sum(map(text.count, _LINE_BREAKS)) + 1
    sep = args[0] if args else kwargs.get("sep")
    limit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
    pieces = text.count(sep) + 1 if isinstance(sep, str) and sep else len(text) // 2 + 1
    return min(pieces, limit + 1) if isinstance(limit, int) and limit >= 0 else pieces


def _finalize(value: Any) -> Any:
    """Every `{{ ... }}` output, anywhere (macros and `{% set %}` blocks too), counts as output (a
    literal's, finalized as the template compiles, is the template's own text)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.produce(len(str(value)))
        budget.check_time()
    return value


def _check_str_method(text: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse a string method that would build text past the bound, before it allocates."""
    what = f"str.{name}"
    ints = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
    if name in ("center", "ljust", "rjust", "zfill"):
        _fits(max([len(text), *ints]), what)
    elif name in ("split", "rsplit", "splitlines"):
        budget = _BUDGET.get()
        if budget is not None:
            budget.afford(_pieces(text, name, args, kwargs) * _PIECE_BYTES + sys.getsizeof(text), what)
    elif name == "expandtabs":
        _fits(len(text) * max([8, *ints]), what)
    elif name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        _fits(len(text) + (len(text) + 1) * len(new) // max(len(old), 1) + len(new), what)
    elif name == "join" and args:
        items = list(args[0]) if isinstance(args[0], (list, tuple, str)) else []
        _fits(len(text) * max(len(items) - 1, 0) + sum(map(_size, items)), what)
    elif name in ("format", "format_map"):
        _fits(len(text) + sum(len(str(a)) for a in (*args, *kwargs.values())) + _widths(text) + max([0, *ints]), what)
    elif name == "translate":
        _fits(
            len(text) * max([1, *map(_size, (args[0] or {}).values())]) if args and isinstance(args[0], dict) else 0,
            what,
        )


def _check_join(value: Any, d: Any = "", attribute: Any = None) -> Any:
    items = list(value)
    _fits(len(str(d)) * max(len(items) - 1, 0) + sum(len(str(i)) for i in items), "the join filter")
    return items


def _check_width(value: Any, width: Any = 80, *args: Any, **kwargs: Any) -> Any:
    lines = str(value).count("\n") + 1
    _fits(len(str(value)) + (width if isinstance(width, int) else _size(width)) * lines, "the filter's width")
    return value


def _check_replace(value: Any, old: Any, new: Any, count: Any = None) -> Any:
    _check_str_method(str(value), "replace", (old, new), {})
    return value


def _check_format(value: Any, *args: Any, **kwargs: Any) -> Any:
    _check_str_method(str(value), "format", args, kwargs)
    return value


def _check_count(value: Any, count: Any = 1, *args: Any, **kwargs: Any) -> Any:
    if isinstance(count, int) and count > TEMPLATE_MAX_ITERATIONS:
        raise TemplateBoundError("iterations", f"the filter was asked for {count} pieces")
    return value


_FILTER_CHECKS: Final[dict[str, Callable[..., Any]]] = {
    "join": _check_join,
    "center": _check_width,
    "indent": _check_width,
    "replace": _check_replace,
    "format": _check_format,
    "batch": _check_count,
    "slice": _check_count,
}
"""Filters that build much from small arguments, and the check run before each (it returns the
value to filter: `join`'s iterator, counted, as a list)."""


def _checked(f: Callable[..., Any], check: Callable[..., Any]) -> Callable[..., Any]:
    """`f`, after `check` of its arguments (those after its environment or context argument, if any)."""
    skip = 1 if _PassArg.from_obj(f) is not None else 0

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        value = check(*args[skip:], **kwargs)
        return f(*args[:skip], value, *args[skip + 1 :], **kwargs)

    return checked


def _unfoldable(f: Callable[..., Any], consuming: bool) -> Callable[..., Any]:
    """`f` as a context filter: Jinja never folds one at compile time, each call checks the deadline,
    what it returns is weighed, and (`consuming`) each item of a generator or string it takes in counts
    as a loop iteration."""
    passing = _PassArg.from_obj(f)

    @pass_context
    def bounded(context: Any, *args: Any, **kwargs: Any) -> Any:
        _spend().check_time()
        if consuming and args and isinstance(args[0], (Iterator, str)):
            args = (_ticking(args[0]), *args[1:])
        if passing is _PassArg.context:
            return _built(f(context, *args, **kwargs), new_items=True)
        if passing is _PassArg.eval_context:
            return _built(f(context.eval_ctx, *args, **kwargs), new_items=True)
        if passing is _PassArg.environment:
            return _built(f(context.environment, *args, **kwargs), new_items=True)
        return _built(f(*args, **kwargs), new_items=True)

    return bounded


def _tojson(value: Any, indent: int | None = None) -> str:
    if indent is not None:
        _fits(indent * 64, "tojson's indent")
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise_exception(message: str) -> None:
    raise TemplateError(message)
