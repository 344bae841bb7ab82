"""The default store (`sdk.memory.sqlite_store`): one SQLite file under the user's cache directory
that what one process learns outlives it in, shared by processes at once, holding hashes and counts
only, and degrading a call to in-process state, never failing it, when the file cannot be used."""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc
from sdk._constants import (
    STATE_EXPIRY_SECONDS,
    STATE_MAX_VALUE_BYTES,
    STATE_SQLITE_BUSY_SECONDS,
    STATE_SQLITE_EVICT_EVERY,
    STATE_SQLITE_MAX_BYTES,
    STATE_SQLITE_MAX_RECORDS,
    STATE_SQLITE_OPEN_SECONDS,
    STATE_SQLITE_SCHEMA,
)
from sdk.memory.place import sqlite_path
from sdk.memory.records import Seen
from sdk.memory.sqlite_link import SqliteLink
from sdk.memory.sqlite_store import SqliteStore
from sdk.memory.store import LocalStore, Store
from sdk.prompt.family_record import FAMILY_RECORDS, FamilyRecord

ROOT = Path(__file__).resolve().parents[3]
PROCESSES = 8
UPDATES = 40  # per process: 8 x 40 answers fit one adaptive-cap window (512)
BUILD, OTHER_BUILD = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
POLICY = "Refunds are issued to the original payment method within ten business days of approval."
WORKLOAD = ("chat.completions", "gpt-5.4", "prefix")


def _build(build: str) -> str:
    """A prompt whose only candidate only calls can tell (a hex run: a commit, a key id, or a nonce)."""
    return f"You are the release assistant. Answer for build {build} only.\n{POLICY}"


def _default_file() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "kvwise" / "state.sqlite3"


def _run(base_url: str, systems: list[str], state: str | None = None) -> subprocess.Popen[str]:
    spec = {"base_url": base_url, "systems": systems} | ({"state": state} if state is not None else {})
    command = [sys.executable, "-m", "tests.sdk.memory.store_worker", json.dumps(spec)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _spans(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, errors = process.communicate()
    assert process.returncode == 0, errors[-2000:]
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def _seen_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM record WHERE kind = 'seen'").fetchone()[0])


def _another_process(path: Path) -> SqliteStore:
    """A store on a connection of its own, as another process opens the file (this process's stores
    share one)."""
    return SqliteStore(path, "tenant", SqliteLink(path))


def _sent_system(simulator: Any) -> str:
    return str(simulator.requests[-1].body["messages"][0]["content"])


@pytest.mark.parametrize(
    ("url", "cache_home", "expected"),
    [
        ("sqlite:///tmp/kvwise/one.sqlite3", "/elsewhere", "/tmp/kvwise/one.sqlite3"),
        ("sqlite://", "/cache", "/cache/kvwise/state.sqlite3"),
        ("sqlite://", "relative/cache", "{home}/.cache/kvwise/state.sqlite3"),  # XDG: a relative path is ignored
        ("sqlite://", "", "{home}/.cache/kvwise/state.sqlite3"),
        ("sqlite:///tmp/with%20space.sqlite3", "", "/tmp/with space.sqlite3"),
    ],
)
def test_a_sqlite_url_names_its_file_and_the_default_is_under_the_users_cache_directory(
    url: str, cache_home: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", cache_home)
    assert sqlite_path(url) == Path(expected.format(home=Path.home()))


@pytest.mark.parametrize("url", ["sqlite://host/file.sqlite3", "sqlite:///file.sqlite3?mode=ro"])
def test_a_sqlite_url_with_a_host_or_options_is_refused_at_wrap(url: str, simulator: Any) -> None:
    with pytest.raises(ValueError, match="sqlite:///path/to/file"):
        sdk.wrap(_bare(simulator), state=url)


def _bare(simulator: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)


def _wrapped(simulator: Any, exporter: InMemorySpanExporter, state: str | None = None) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return sdk.wrap(_bare(simulator), sdk.Policy(retries=0), tracer_provider=provider, state=state)


def _ask(client: Any, system: str) -> Any:
    return client.chat.completions.create(
        model="gpt-5.4",
        max_tokens=16,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
    )


@pytest.mark.parametrize("off", ["argument", "environment"])
def test_the_default_store_is_the_file_and_memory_turns_it_off(
    off: str, simulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _ask(_wrapped(simulator, InMemorySpanExporter()), _build(BUILD)).choices
    assert _default_file().is_file()
    monkeypatch.setenv("XDG_CACHE_HOME", os.environ["XDG_CACHE_HOME"] + "-off")
    if off == "environment":
        monkeypatch.setenv("KVWISE_STATE_URL", "memory")
    client = _wrapped(simulator, InMemorySpanExporter(), state="memory" if off == "argument" else None)
    assert _ask(client, _build(BUILD)).choices
    assert not _default_file().parent.exists()


@pytest.mark.parametrize("state", [None, "memory"])
def test_a_second_process_learns_what_the_first_learnt_through_the_default_store(
    state: str | None, simulator: Any
) -> None:
    """Run 1 sends the build, run 2 another: the family's candidate differed between two calls, so
    with the file run 2 moves it; in memory run 2 is a first call again and keeps it in place."""
    assert _spans(_run(simulator.openai_base_url, [_build(BUILD)], state)) == [
        {"degraded": None, "reason": None, "break_cause": None}
    ]
    assert BUILD in _sent_system(simulator)  # a first call: nothing known, nothing moved
    [second] = _spans(_run(simulator.openai_base_url, [_build(OTHER_BUILD)], state))
    assert second["degraded"] is None
    assert (OTHER_BUILD in _sent_system(simulator)) is (state == "memory")
    assert POLICY in _sent_system(simulator)


def test_a_second_process_names_the_cache_break_against_the_first_ones_last_call(simulator: Any) -> None:
    _spans(_run(simulator.openai_base_url, [f"You are the release assistant.\n{POLICY}"]))
    [second] = _spans(_run(simulator.openai_base_url, [f"You are the support assistant.\n{POLICY}"]))
    assert second["break_cause"] == "system_changed"


def test_the_file_holds_hashes_and_counts_and_no_prompt_text(simulator: Any) -> None:
    systems = [_build(build) for build in (BUILD, OTHER_BUILD, BUILD)]
    _spans(_run(simulator.openai_base_url, systems))
    _spans(_run(simulator.openai_base_url, systems[:1]))
    file = _default_file()
    with sqlite3.connect(file) as db:
        kinds = dict(db.execute("SELECT kind, count(*) FROM record GROUP BY kind").fetchall())
    assert kinds.keys() >= {"family", "seen"}, kinds  # it holds what was learnt ...
    stored = b"".join(path.read_bytes() for path in file.parent.iterdir())
    for text in (POLICY, "release assistant", BUILD, OTHER_BUILD, "Which build", "refund", "Refunds"):
        assert text.encode() not in stored  # ... and none of the prompt


def _counting(path: str, start: Any, errors: Any) -> None:
    """One of the processes at once: adds to a counter kept in a family's record, and answers to a
    workload's window, each `UPDATES` times; counts the operations the file did not take."""
    store = SqliteStore(Path(path), "tenant")
    start.wait()
    failed = 0
    for index in range(UPDATES):
        store.update_record(FAMILY_RECORDS, b"counter", _add_one)
        failed += store.link.outages.reason_for_call() is not None
        store.push_answer(WORKLOAD, index, None)
        failed += store.link.outages.reason_for_call() is not None or store.outage() is not None
    errors.put(failed)


def _add_one(record: FamilyRecord | None) -> FamilyRecord:
    """A counter kept in a family's record (its turns): what a lost update would show."""
    count = record.turns + 1 if record is not None else 1
    return FamilyRecord((count,), (False,), (False,), b"", count)


def _read(record: FamilyRecord | None) -> FamilyRecord:
    return record if record is not None else FamilyRecord((), (), (), b"", 0)


def _family_rows(path: Path) -> list[bytes]:
    with sqlite3.connect(path) as db:
        return [key for (key,) in db.execute("SELECT key FROM record WHERE kind = 'family'")]


def test_the_file_keeps_at_most_its_cap_of_records_the_least_recently_used_dropped(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path, "tenant")
    store.update_record(FAMILY_RECORDS, b"oldest", _add_one)
    store.update_record(FAMILY_RECORDS, b"kept", _add_one)
    for index in range(STATE_SQLITE_MAX_RECORDS + 2 * STATE_SQLITE_EVICT_EVERY):
        store.update_record(FAMILY_RECORDS, index.to_bytes(4, "big"), _add_one)
        if index % 64 == 0:
            store.update_record(FAMILY_RECORDS, b"kept", _add_one)  # used again and again: never the LRU
    assert STATE_SQLITE_MAX_RECORDS <= len(_family_rows(path)) <= STATE_SQLITE_MAX_RECORDS + STATE_SQLITE_EVICT_EVERY
    again = _another_process(path)  # what it finds
    assert again.update_record(FAMILY_RECORDS, b"oldest", _read).turns == 0
    assert again.update_record(FAMILY_RECORDS, b"kept", _read).turns > 1


def test_a_record_unused_for_the_expiry_is_dropped_when_the_file_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path, "tenant")
    store.update_record(FAMILY_RECORDS, b"one", _add_one)
    store.update_record(FAMILY_RECORDS, b"other", _add_one)
    expired = _family_rows(path)[0]
    with sqlite3.connect(path) as db:  # one was last used just over a week ago
        db.execute("UPDATE record SET used = used - ? WHERE key = ?", (STATE_EXPIRY_SECONDS + 60, expired))
    assert _another_process(path).lengths(WORKLOAD) == []  # the file opened again: evicted
    assert expired not in _family_rows(path) and len(_family_rows(path)) == 1


@pytest.mark.parametrize("where", ["file", "process"])
def test_a_value_is_kept_under_its_kind_and_key_replaced_atomically_and_dropped_by_none(
    where: str, tmp_path: Path
) -> None:
    def store() -> Store:
        return SqliteStore(tmp_path / "state.sqlite3", "tenant") if where == "file" else shared

    shared: Store = LocalStore()
    assert store().update_value("context", b"model-a", lambda found: found or "8192") == "8192"
    assert store().update_value("context", b"model-b", lambda found: found) is None  # another key: nothing yet
    assert store().update_value("lines", b"model-a", lambda found: found) is None  # another kind: nothing yet
    assert store().update_value("context", b"model-a", lambda found: f"{found},4096") == "8192,4096"
    assert store().update_value("context", b"model-a", lambda found: None) is None
    assert store().update_value("context", b"model-a", lambda found: found) is None
    with pytest.raises(ValueError, match="at most"):
        store().update_value("context", b"model-a", lambda found: "x" * (STATE_MAX_VALUE_BYTES + 1))


def test_a_full_file_degrades_the_operation_that_found_it_full_and_it_answers_from_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sdk.memory.sqlite_link.STATE_SQLITE_MAX_BYTES", 64 * 1024)  # 16 pages: full soon
    store = SqliteStore(tmp_path / "state.sqlite3", "tenant")
    reasons = []
    for index in range(2000):
        answered = store.update_record(FAMILY_RECORDS, index.to_bytes(4, "big"), _add_one)
        assert answered.turns == 1  # answered, full or not
        reasons.append(store.link.outages.reason_for_call())
    first = next(index for index, reason in enumerate(reasons) if reason is not None)
    assert 10 < first and reasons[first] == "OperationalError: database or disk is full"
    assert (tmp_path / "state.sqlite3").stat().st_size <= 64 * 1024


def _add_in_child(store: SqliteStore, result: Any) -> None:
    for _ in range(3):
        store.update_record(FAMILY_RECORDS, b"counter", _add_one)
    result.put(store.outage())


def test_a_forked_child_opens_the_file_again_and_parent_and_child_both_keep_counting(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.sqlite3", "tenant")
    store.update_record(FAMILY_RECORDS, b"counter", _add_one)  # the parent's connection is open when it forks
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_add_in_child, args=(store, result))
    child.start()
    child.join()
    assert child.exitcode == 0 and result.get() is None
    assert store.update_record(FAMILY_RECORDS, b"counter", _add_one).turns == 5 and store.outage() is None


def test_eight_processes_writing_at_once_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    context = multiprocessing.get_context("spawn")
    start, errors = context.Event(), context.Queue()
    workers = [context.Process(target=_counting, args=(str(path), start, errors)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    assert [errors.get() for _ in workers] == [0] * PROCESSES
    store = SqliteStore(path, "tenant")
    assert store.update_record(FAMILY_RECORDS, b"counter", _read).turns == PROCESSES * UPDATES
    assert sorted(store.lengths(WORKLOAD)) == sorted(list(range(UPDATES)) * PROCESSES)


@contextmanager
def _held_by_another_process(path: Path, seconds: float) -> Iterator[None]:
    """Another connection holds the file's write lock for `seconds`, as a process creating the file
    (or checkpointing it) does through its disk syncs on a slow disk."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(seconds, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        yield
    finally:
        release.join()
        holder.close()


def test_opening_waits_out_a_lock_longer_than_a_write_would_and_a_write_does_not(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    _kvwise_file(path)
    held = (STATE_SQLITE_BUSY_SECONDS + STATE_SQLITE_OPEN_SECONDS) / 2
    opened = _another_process(path)
    assert opened.update_record(FAMILY_RECORDS, b"family", _add_one).turns == 2 and opened.outage() is None
    with _held_by_another_process(path, held):
        opening = _another_process(path)
        assert opening.update_record(FAMILY_RECORDS, b"family", _add_one).turns == 3  # waited: read from the file
        assert opening.outage() is None
    with _held_by_another_process(path, held):
        assert opened.update_record(FAMILY_RECORDS, b"family", _add_one).turns == 1  # went on without the file ...
        assert opened.outage() == "OperationalError: database is locked"  # ... and says why


def test_a_client_collected_inside_another_ones_write_defers_its_last_fingerprint_without_a_stall(
    tmp_path: Path,
) -> None:
    """The garbage collector runs a collected client's finalizer wherever it happens to run, here inside
    a write transaction of this thread: the file's one connection in this process is in use, so the
    fingerprint is written at the file's next use, and no call waits or degrades."""
    path = tmp_path / "state.sqlite3"
    kept, collected = SqliteStore(path, "tenant"), SqliteStore(path, "other tenant")
    assert kept.link is collected.link  # one connection per file and process
    collected.exchange_seen("chat.completions", Seen("gpt-5.4", [], ("",), 0.0))

    def collect_inside_a_write(db: sqlite3.Connection) -> None:
        nonlocal collected
        with kept.link.writing(db):
            del collected
            gc.collect()

    assert kept.link.run(collect_inside_a_write) == (True, None)
    assert kept.outage() is None and _seen_rows(path) == 0  # deferred, not written by the collector
    assert kept.update_record(FAMILY_RECORDS, b"family", _add_one).turns == 1 and kept.outage() is None
    assert _seen_rows(path) == 2  # written at the next use: the API and model's, and the API's latest


def test_eight_processes_calling_at_once_never_fail_a_call_nor_degrade(simulator: Any) -> None:
    systems = [_build(build) for build in (BUILD, OTHER_BUILD, BUILD, OTHER_BUILD)]
    runs = [_spans(process) for process in [_run(simulator.openai_base_url, systems) for _ in range(PROCESSES)]]
    assert [len(spans) for spans in runs] == [len(systems)] * PROCESSES
    assert [span for spans in runs for span in spans if span["degraded"] is not None] == []
    with sqlite3.connect(_default_file()) as db:
        families = [json.loads(value) for (value,) in db.execute("SELECT value FROM record WHERE kind = 'family'")]
    assert [1] in [changed for _, changed, *_ in families]  # the family's build, seen changing by all


# --- a file that cannot be used ------------------------------------------------------------------


def _kvwise_file(path: Path) -> None:
    """A file as kvwise lays it out, with a family learnt (by another process: closed since)."""
    store = _another_process(path)
    store.update_record(FAMILY_RECORDS, b"family", lambda _: FamilyRecord((1,), (False,), (False,), b"", 1))
    assert store.outage() is None and path.is_file()
    store.link.close()


def _corrupt(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    yield


def _locked(path: Path) -> Iterator[None]:
    _kvwise_file(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than the busy timeout
    try:
        yield
    finally:
        other.close()


def _read_only(path: Path) -> Iterator[None]:
    _kvwise_file(path)
    if os.geteuid() == 0:  # root writes through permissions: an immutable file is a read-only disk to it
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here: no read-only file for root")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o444)
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(0o755)


def _oversized(path: Path) -> Iterator[None]:
    _kvwise_file(path)
    os.truncate(path, STATE_SQLITE_MAX_BYTES + 1)  # sparse: no disk used
    yield


def _newer(path: Path) -> Iterator[None]:
    _kvwise_file(path)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {STATE_SQLITE_SCHEMA + 1}")
    yield


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_corrupt, "DatabaseError: file is not a database"),
        (_locked, "OperationalError: database is locked"),
        (_read_only, "OperationalError: attempt to write a readonly database"),
        (_oversized, f"the file is too large ({STATE_SQLITE_MAX_BYTES + 1} bytes, at most {STATE_SQLITE_MAX_BYTES})"),
        (_newer, f"the file was laid out by a newer kvwise (layout {STATE_SQLITE_SCHEMA + 1}, this one reads"),
    ],
)
def test_a_file_that_cannot_be_used_degrades_every_call_says_why_once_in_the_log_and_the_calls_still_learn(
    make: Callable[[Path], Iterator[None]],
    reason: str,
    simulator: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "kvwise" / "state.sqlite3"
    with contextmanager(make)(path), caplog.at_level(logging.WARNING, logger="sdk.memory"):
        exporter = InMemorySpanExporter()
        client = _wrapped(simulator, exporter, state=f"sqlite://{path}")
        for build in (BUILD, OTHER_BUILD, OTHER_BUILD):
            assert _ask(client, _build(build)).choices  # never failed
        moved = OTHER_BUILD not in _sent_system(simulator)
    spans = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    assert [span.get(sc.KVWISE_STATE_DEGRADED) for span in spans] == [True] * 3
    assert all(span[sc.KVWISE_STATE_DEGRADED_REASON].startswith(reason) for span in spans), spans[0]
    warnings = [record.getMessage() for record in caplog.records if str(path) in record.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0]
    assert moved  # in-process state: the third call knows the build changed on the second
