"""The memories sit on one store interface (`sdk.memory.store`): no class in `sdk` reaches into its
base's private methods, and memories sharing one in-process store keep their records apart."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import sdk
from sdk.cache.fanout import FanOut
from sdk.call import Usage
from sdk.decode.adaptive_caps import AdaptiveCaps
from sdk.memory.store import LocalStore
from sdk.prompt.families import FamilyMemory


def private_overrides(classes: list[type]) -> list[tuple[str, str, str]]:
    """`(class, base, name)` for each private method a class redefines from one of its `sdk` bases."""
    found = []
    for cls in classes:
        for name, value in vars(cls).items():
            # Methods only: a Protocol subclass carries typing's own `_is_protocol` and `_abc_impl`.
            if not name.startswith("_") or name.startswith("__") or not inspect.isfunction(value):
                continue
            bases = [base for base in cls.__mro__[1:] if base.__module__.startswith(("sdk", __name__))]
            found += [(cls.__qualname__, base.__qualname__, name) for base in bases if name in vars(base)]
    return found


def _sdk_classes() -> list[type]:
    classes = []
    for info in pkgutil.walk_packages(sdk.__path__, "sdk."):
        if info.name.endswith("__main__"):  # a command line: importing it runs it
            continue
        module = importlib.import_module(info.name)
        classes += [cls for _, cls in inspect.getmembers(module, inspect.isclass) if cls.__module__ == info.name]
    return classes


def test_a_subclass_that_overrides_a_private_method_is_found():
    class Tracker:
        def _exchange(self) -> None: ...

    class SharedTracker(Tracker):
        def _exchange(self) -> None: ...

        def public(self) -> None: ...

    assert private_overrides([Tracker, SharedTracker]) == [
        (SharedTracker.__qualname__, Tracker.__qualname__, "_exchange")
    ]


def test_no_sdk_class_overrides_a_private_method_of_its_base():
    classes = _sdk_classes()
    assert any(cls.__name__ == "LocalStore" for cls in classes)  # the walk reached sdk.memory
    assert private_overrides(classes) == []


def test_memories_on_one_local_store_keep_their_records_apart_and_bounded():
    store = LocalStore(records=1, workloads=2)
    families, caps, fanout = FamilyMemory(store), AdaptiveCaps(store), FanOut(store)
    families.observe(b"a", (1,), b"run")
    families.observe(b"b", (2,), b"run")
    for name in ("x", "y", "z"):
        caps.learn(("chat.completions", "m", name), Usage(output_tokens=5), cap=None, adaptive=False)
    follow, leader = fanout.join(b"a")
    assert (len(families), len(caps), fanout.in_flight()) == (1, 2, 1)
    assert follow is None and leader is not None
    fanout.release(leader)
    assert fanout.in_flight() == 0 and len(families) == 1
