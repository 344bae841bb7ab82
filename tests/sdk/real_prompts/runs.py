"""Runs of the corpus: each a process of its own (`tests.sdk.real_prompts.calls`) that sends every
prompt once, rendered for one user on one day, against a recording server; and what two runs' system
prompts keep in common.

A run names its user, its day and its cache home (the user's `$XDG_CACHE_HOME`, where the default
store keeps what a process learnt); a fresh home is a first sight. What the server received is read
back by the tag each call's user turn starts with (`[run:prompt]`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.sdk.real_prompts import RealPrompt

ROOT = Path(__file__).resolve().parents[3]
NOTE = re.compile(r"<request_context>\n?(.*?)\n?</request_context>", re.DOTALL)
_TAG = re.compile(r"\[(?P<run>[\w-]+):(?P<prompt>[\w.-]+)\]")
QUESTION = "What should I do first?"


@dataclass(frozen=True)
class Run:
    """One process's calls: every prompt rendered for `user` on `day`, wrapped or bare."""

    name: str
    user: str
    day: int
    wrap: bool
    home: Path


@dataclass(frozen=True)
class Sent:
    """One call as the server received it: the system prompt and the notes of its user turn."""

    system: str
    notes: tuple[str, ...]


def start(run: Run, prompts: Sequence[RealPrompt], base_url: str) -> subprocess.Popen[str]:
    """Start `run`'s process (the caller waits for it: `finish`)."""
    calls = [
        {"model": p.model, "system": p.render(run.user, run.day), "user": f"[{run.name}:{p.id}] {QUESTION}"}
        for p in prompts
    ]
    env = os.environ | {"XDG_CACHE_HOME": str(run.home)}
    env.pop("KVWISE_STATE_URL", None)
    spec = run.home.parent / f"{run.name}-{prompts[0].id}.json"
    spec.write_text(json.dumps({"base_url": base_url, "wrap": run.wrap, "calls": calls}))
    command = [sys.executable, "-m", "tests.sdk.real_prompts.calls", str(spec)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> list[dict[str, int]]:
    """Wait for a run's process; return its calls' usage (`calls.main`)."""
    out, errors = process.communicate()
    assert process.returncode == 0, errors[-3000:]
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def received(requests: Sequence[Any]) -> dict[tuple[str, str], Sent]:
    """Each call the server received, by (run, prompt)."""
    sent: dict[tuple[str, str], Sent] = {}
    for request in requests:
        messages = request.body["messages"]
        user = messages[-1]["content"]
        user = user if isinstance(user, str) else "".join(part.get("text", "") for part in user)
        tag = _TAG.search(user)
        assert tag is not None, user[:200]
        sent[(tag["run"], tag["prompt"])] = Sent(messages[0]["content"], tuple(NOTE.findall(user)))
    return sent


def kept_share(prompt: RealPrompt, first: str, second: str) -> float:
    """The bytes of the prefix two runs' system prompts have in common, over the prompt's stable
    bytes (the ideal: every stable byte kept), at most 1."""
    a, b = first.encode(), second.encode()
    common = next((index for index, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return min(1.0, common / prompt.stable_bytes)
