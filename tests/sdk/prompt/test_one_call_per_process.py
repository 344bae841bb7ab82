"""Savings in every process: five processes, one wrapped call each, read the stable prefix.

The shape of serverless functions, CLI agents and per-item batch workers: each process wraps a
client and makes one call whose system prompt starts `Request ID: <uuid4>\\nCurrent time: <ISO
8601>\\n` before a long policy. The values move on first sight (`sdk.prompt.first_sight`), so every
process sends the policy as the same bytes, and each call after the first reads it from the cache;
the bare client, its id in front, reads nothing. Real clients in real processes
(`tests.sdk.prompt.one_call`), against the simulator (OpenAI's automatic cache, Anthropic's breakpoints)
and the local server's block cache.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local_backend.serving import served_engine
from tests.sdk.prompt import one_call

ROOT = Path(__file__).resolve().parents[3]
PROCESSES = 5
READ_SHARE = 0.9  # of the stable prefix, on every call after the first
RULES = [
    "Refunds are issued to the original payment method within ten business days of approval.",
    "Escalate any mention of data loss, a security incident or legal action to the on-call lead.",
    "Quote the service level agreement by section number and never paraphrase its credits.",
    "Ask for the account email before discussing invoices, and never read a card number back.",
    "Outages are posted on the status page first; link it before explaining what happened.",
]


def _policy(sentences: int) -> str:
    """A long, stable support policy (numbered rules, as such prompts are written)."""
    return "\n".join(f"{index + 1}. {RULES[index % len(RULES)]}" for index in range(sentences))


def _system(policy: str) -> str:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return f"Request ID: {uuid.uuid4()}\nCurrent time: {now}\n{policy}"


def _one_call(package: str, base_url: str, model: str, system: str, *, wrap: bool) -> dict[str, int]:
    """A wrapped call in a process of its own; a bare one here (a bare client keeps nothing between calls)."""
    spec = {
        "package": package,
        "base_url": base_url,
        "model": model,
        "system": system,
        "user": "Where is my refund?",
        "wrap": wrap,
    }
    if not wrap:
        return one_call.main(spec)
    out = subprocess.run(
        [sys.executable, "-m", "tests.sdk.prompt.one_call", json.dumps(spec)], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def _reads(package: str, base_url: str, model: str, policy: str) -> tuple[list[int], list[int], int]:
    """Cached tokens of five bare and five wrapped processes, and the tokens of the stable prefix
    (the policy's call, as the server counts it: a bare call with the policy alone, less its user turn)."""
    bare = [_one_call(package, base_url, model, _system(policy), wrap=False)["cached"] for _ in range(PROCESSES)]
    wrapped = [_one_call(package, base_url, model, _system(policy), wrap=True)["cached"] for _ in range(PROCESSES)]
    stable = (
        _one_call(package, base_url, model, policy, wrap=False)["input"]
        - _one_call(package, base_url, model, "", wrap=False)["input"]
    )
    return bare, wrapped, stable


@pytest.mark.parametrize(("package", "model"), [("openai", "gpt-5.4"), ("anthropic", "claude-sonnet-4-6")])
def test_five_processes_one_wrapped_call_each_read_the_stable_prefix_on_the_simulator(simulator, package, model):
    base_url = simulator.openai_base_url if package == "openai" else simulator.anthropic_base_url
    bare, wrapped, stable = _reads(package, base_url, model, _policy(300))
    assert stable > 4000 and bare == [0] * PROCESSES, (stable, bare)
    assert all(read >= READ_SHARE * stable for read in wrapped[1:]), (wrapped, stable)


@pytest.fixture(scope="module")
def local_url() -> Iterator[str]:
    with served_engine("default") as served:
        yield f"{served.url}/v1"


def test_five_processes_one_wrapped_call_each_read_the_stable_prefix_on_the_local_server(local_url):
    bare, wrapped, stable = _reads("openai", local_url, "tiny", _policy(30))
    assert stable > 500 and bare == [0] * PROCESSES, (stable, bare)
    assert all(read >= READ_SHARE * stable for read in wrapped[1:]), (wrapped, stable)
