"""The pytest plugin that runs openai's and anthropic's own test suites with every client wrapped.

Loaded by `tests.conformance.run` (`-p kvwise_wrap_plugin`, from this folder on PYTHONPATH: the upstream
suites are packages named `tests` too, so this module must not live under ours). Unless `--kvwise-bare`:

- every construction of a client class (a subclass of the package's `SyncAPIClient` or
  `AsyncAPIClient`; the packages' private module-level clients, `openai._ModuleClient` and kin, are
  the library's own and stay bare) returns `sdk.wrap(client)` under the default `sdk.Policy()`, with
  no tracer or meter provider (OpenTelemetry's global one: a no-op unless a test installs its own);
  the clients' own `copy`/`with_options` build the bare copy that the wrapped client wraps again, and
  `copy.copy`'s bare `__new__` (`copyreg.__newobj__`) stays bare, as it is no construction (building and
  wrapping a whole client there cost a TLS context each: half the wrapped time of anthropic's pollers);
- a test handed a bare client (a fixture value, a module global) or constructing one some other way
  fails, and a sentinel test (`kvwise_wrap_sentinel`) checks that a client the tests' way
  constructs is wrapped and that a call through it goes through kvwise (tools sent sorted by name).

Either way, `--kvwise-results PATH` writes each test's outcome there as JSON (the controller's view
under xdist): {"failed": {nodeid: one-line error}, "passed": n, "skipped": n, "seconds": wall time};
each failure is also appended to PATH with the suffix `.partial` as it happens.
"""

from __future__ import annotations

import contextvars
import copyreg
import functools
import importlib
import json
import pkgutil
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PACKAGES = ("openai", "anthropic")
SENTINEL = "kvwise_wrap_sentinel"
_COPIES = ("copy", "with_options")
_bare: contextvars.ContextVar[bool] = contextvars.ContextVar("kvwise_bare_construction", default=False)
_made: weakref.WeakSet[Any] = weakref.WeakSet()  # real clients built on the plugin's way (wrapped, or a copy's)
_strays: list[str] = []  # classes of clients built any other way, since the current test began


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvwise")
    group.addoption("--kvwise-bare", action="store_true", help="leave the clients bare (the baseline run)")
    group.addoption("--kvwise-results", default=None, help="write each test's outcome to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--kvwise-bare"):
        for name in PACKAGES:
            if name in _packages_under_test(config):
                _wrap_constructions(name)
        config.pluginmanager.register(_Checks(), "kvwise-wrap-checks")
    if config.getoption("--kvwise-results") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Results(Path(config.getoption("--kvwise-results"))), "kvwise-results")


def _packages_under_test(config: pytest.Config) -> tuple[str, ...]:
    """The package whose sdist the run is in (its folder is named `<package>-<version>`)."""
    folder = Path(str(config.rootpath)).name
    return tuple(name for name in PACKAGES if folder.startswith(f"{name}-")) or PACKAGES


def _client_bases(name: str) -> tuple[type, type]:
    base = importlib.import_module(f"{name}._base_client")
    return base.SyncAPIClient, base.AsyncAPIClient


def _public(cls: type) -> bool:
    return not cls.__name__.startswith("_")


def _is_bare(value: Any) -> bool:
    """A client object itself, not kvwise's wrapper of it (whose own type is none of the client classes)."""
    kind = type(value)
    return _public(kind) and any(name in sys.modules and issubclass(kind, _client_bases(name)) for name in PACKAGES)


def _wrap_constructions(name: str) -> None:
    """Make each construction of `name`'s clients return the wrapped client (see the module docstring)."""
    import sdk

    for module in pkgutil.walk_packages(importlib.import_module(f"{name}.lib").__path__, f"{name}.lib."):
        try:  # the platform clients (Azure, Bedrock, Vertex, Foundry) are in lib/; some need extras
            importlib.import_module(module.name)
        except ImportError:
            continue
    policy = sdk.Policy()
    for base in _client_bases(name):
        original_new = base.__new__
        original_init = base.__init__

        def new(cls: type, *args: Any, _new: Any = original_new, **kwargs: Any) -> Any:
            if _bare.get() or not _public(cls) or sys._getframe(1).f_code is copyreg.__newobj__.__code__:
                instance = _new(cls)
                _made.add(instance)
                return instance
            token = _bare.set(True)
            try:
                client = cls(*args, **kwargs)
            finally:
                _bare.reset(token)
            return sdk.wrap(client, policy)

        def init(self: Any, *args: Any, _init: Any = original_init, **kwargs: Any) -> None:
            if self not in _made and _public(type(self)):
                _strays.append(type(self).__qualname__)
            _init(self, *args, **kwargs)

        base.__new__ = staticmethod(new)  # type: ignore[method-assign,assignment]
        base.__init__ = init  # type: ignore[method-assign]
        for cls in _subclasses(base):
            for method in _COPIES:
                if method in vars(cls):
                    setattr(cls, method, _bare_copy(vars(cls)[method]))


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _bare_copy(copy: Callable[..., Any]) -> Callable[..., Any]:
    """The client's own `copy`: its new client bare, for the wrapped client's `copy` to wrap."""

    @functools.wraps(copy)
    def bare_copy(*args: Any, **kwargs: Any) -> Any:
        token = _bare.set(True)
        try:
            return copy(*args, **kwargs)
        finally:
            _bare.reset(token)

    return bare_copy


class _Checks:
    """A test handed or building a bare client fails; the sentinel test is added to the run."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        handed = [
            f"{where} {key}"
            for where, values in (
                ("fixture", getattr(item, "funcargs", {})),
                ("module global", getattr(getattr(item, "module", None), "__dict__", {})),
                ("class attribute", getattr(getattr(item, "cls", None), "__dict__", {})),
                ("instance attribute", getattr(getattr(item, "instance", None), "__dict__", {})),
            )
            for key, value in dict(values).items()
            if _is_bare(value)
        ]
        if handed:
            raise AssertionError(f"kvwise conformance: the test was handed a bare client: {', '.join(handed)}")
        result = yield
        if _strays:
            strays = ", ".join(sorted(set(_strays)))
            raise AssertionError(f"kvwise conformance: a client was built bare, past sdk.wrap: {strays}")
        return result

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        _strays.clear()

    @pytest.hookimpl(trylast=True)  # after the suites' own hooks, which read their tests' fixtures
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        items.append(_Sentinel.from_parent(session, name=SENTINEL))


class _Sentinel(pytest.Item):
    """The wrapping is real: a client built as the tests build theirs is kvwise's, and kvwise rewrites its call."""

    fixturenames: tuple[str, ...] = ()

    def runtest(self) -> None:
        import httpx2

        sent: list[bytes] = []

        def answer(request: httpx2.Request) -> httpx2.Response:
            sent.append(request.content)
            return httpx2.Response(400, json={"error": {"message": "sentinel", "type": "invalid_request_error"}})

        for name in _packages_under_test(self.config):
            module = importlib.import_module(name)
            sync, async_ = (
                (module.OpenAI, module.AsyncOpenAI) if name == "openai" else (module.Anthropic, module.AsyncAnthropic)
            )
            client = sync(api_key="k", max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
            for made, cls in (
                (client, sync),
                (client.copy(), sync),
                (client.with_options(timeout=5), sync),
                (async_(api_key="k"), async_),
            ):
                assert isinstance(made, cls) and not _is_bare(made), f"{name}: {type(made)} is bare"
            try:
                _call(name, client, ["zeta", "alpha"])
            except module.BadRequestError:
                pass
            names = [tool.get("name") or tool["function"]["name"] for tool in json.loads(sent[-1])["tools"]]
            assert names == ["alpha", "zeta"], f"{name}: the call did not go through kvwise (tools sent as {names})"

    def reportinfo(self) -> tuple[Path, int, str]:
        return Path(__file__), 0, SENTINEL


def _call(package: str, client: Any, tools: list[str]) -> None:
    """A model call offering `tools` in this order (kvwise's default policy sends them sorted by name)."""
    messages = [{"role": "user", "content": "hi"}]
    schema = {"type": "object"}
    if package == "openai":
        functions = [{"type": "function", "function": {"name": name, "parameters": schema}} for name in tools]
        client.chat.completions.create(model="gpt-4o", messages=messages, tools=functions)
    else:
        described = [{"name": name, "input_schema": schema} for name in tools]
        client.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=messages, tools=described)


class _Results:
    """Each test's outcome, as the session's controller sees it, written at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed: dict[str, str] = {}
        self.passed: set[str] = set()
        self.skipped: set[str] = set()
        self.started = time.monotonic()
        path.with_suffix(".partial").unlink(missing_ok=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.nodeid not in self.failed:
            self.failed[report.nodeid] = f"{report.when}: {_one_line(report)}"
            with self.path.with_suffix(".partial").open("a") as partial:  # what a run cut short had found
                partial.write(f"{report.nodeid}\t{self.failed[report.nodeid]}\n")
        elif report.skipped:
            self.skipped.add(report.nodeid)
        elif report.when == "call":
            self.passed.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        outcome = {
            "failed": self.failed,
            "passed": len(self.passed - set(self.failed)),
            "skipped": len(self.skipped - set(self.failed)),
            "seconds": round(time.monotonic() - self.started, 1),
        }
        self.path.write_text(json.dumps(outcome, indent=1, sort_keys=True))


def _one_line(report: pytest.TestReport) -> str:
    """The error, and where it was raised: the deepest line of kvwise's in the traceback, else the deepest."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = " ".join((crash.message if crash is not None else str(report.longrepr)).split())[:300]
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", [])
    places = [f"{loc.path}:{loc.lineno}" for entry in entries if (loc := getattr(entry, "reprfileloc", None))]
    ours = [place for place in places if "/sdk/" in place or place.startswith("sdk/")]
    where = (ours or places or [""])[-1]
    return f"{text} [at {where}]" if where else text
