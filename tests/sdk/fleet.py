"""A fleet of worker processes (`tests.sdk.fleet_worker`), each wrapping its own client, against the
simulator, sharing a Redis (`tests.redis_server`) or not: what the shared-state tests and
`bench_shared_state` run.

Who waited for whom is scripted (the simulator holds the leader in prefill until every follower
listens on Redis), never timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.redis_server import RedisServer
from tests.sdk.helpers import until
from tests.sdk.savings_workloads import shared_prefix

ROOT = Path(__file__).resolve().parents[2]
WORKERS, PER_WORKER, PREFIX_TOKENS = 4, 8, 20_000
DEADLINE_SECONDS = 120.0
PATIENT_SECONDS = 5.0  # each store command's bound in the fleet (`RedisServer.url_bounded`: the machine is loaded)


def start_worker(simulator: Any, worker: int, **arguments: Any) -> subprocess.Popen[str]:
    """Start worker number `worker` on `arguments` (see `fleet_worker`)."""
    arguments = {"base_url": simulator.openai_base_url, "worker": worker, **arguments}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(arguments, file)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sdk.fleet_worker", file.name],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def results(workers: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    """What each worker printed: its answers and its spans' `kvwise.*` attributes."""
    found = []
    for worker in workers:
        out, err = worker.communicate(timeout=DEADLINE_SECONDS)
        if worker.returncode != 0:
            raise AssertionError(f"a worker failed: {err[-3000:]}")
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def listeners(server: RedisServer) -> int:
    """Followers waiting on a fan-out lease's channel right now, in every worker."""
    client = server.client()
    channels = client.pubsub_channels("kvwise:*:released:*")
    return sum(count for _, count in client.pubsub_numsub(*channels)) if channels else 0


def fan_out(simulator: Any, state: RedisServer | None) -> list[dict[str, Any]]:
    """`WORKERS` processes of `PER_WORKER` concurrent calls each on one 20k-token prefix, fan-out warm;
    the leader (with in-process state: each worker's) held in prefill until every follower waits."""
    release = threading.Event()
    simulator.hold(release, times=1 if state is not None else WORKERS)
    arguments = {
        "task": "fanout",
        "system": shared_prefix(PREFIX_TOKENS),
        "n": PER_WORKER,
        "policy": {"fanout": "warm"},
        "state": state.url_bounded(PATIENT_SECONDS) if state is not None else "memory",
    }
    workers = [start_worker(simulator, worker, **arguments) for worker in range(WORKERS)]
    if state is not None:
        until(lambda: simulator.held == 1 and listeners(state) == WORKERS * PER_WORKER - 1)
    else:
        until(lambda: simulator.held == WORKERS)
    release.set()
    return [answer for result in results(workers) for answer in result["answers"]]
