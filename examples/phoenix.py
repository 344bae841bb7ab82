"""Start Arize Phoenix in a child process on free loopback ports, for the demo, the examples and the tests.

    with phoenix_server() as phoenix:                  # builds .venv-phoenix first if it is missing
        setup(phoenix.url, project="my-app")           # sdk.telemetry.setup: OTLP/HTTP to Phoenix
        ...
        phoenix.spans("my-app")                        # REST: what Phoenix stored
        phoenix.trace_url("my-app", trace_id)          # the page a person opens
        phoenix.show_until_interrupted("my-app")       # print the project's page, wait for Ctrl-C

Phoenix is a server with dependencies of its own (they clash with anthropic 2.x), so it runs from
its own venv, `.venv-phoenix`, built by `make phoenix-venv` (the one place its install is written);
nothing here imports it: spans go to it over OTLP/HTTP, reads come back over REST and GraphQL. It
keeps its database in a working directory (a fresh temporary one unless given), makes no requests
outside the machine (`PHOENIX_ALLOW_EXTERNAL_RESOURCES=false`, telemetry off), and serves its UI,
OTLP/HTTP (`/v1/traces`), REST and GraphQL on one port.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from examples.local_server import free_port, wait_healthy
from sdk import semconv as sc

ROOT = Path(__file__).resolve().parents[1]
PHOENIX_VENV = ROOT / ".venv-phoenix"
PHOENIX_EXECUTABLE = PHOENIX_VENV / "bin" / "phoenix"
MAKE_PHOENIX_VENV = ("make", "--no-print-directory", "-C", str(ROOT), "phoenix-venv")
"""The Makefile holds Phoenix's install (its pinned version too); `make -q` says whether it is done."""
HOST = "127.0.0.1"
STARTUP_TIMEOUT_SECONDS = 240.0
INGEST_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
REQUEST_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.5
IDLE_SLEEP_SECONDS = 3600.0
SPAN_LIMIT = 1000
SPAN_COST_QUERY = "query($spanId: String!) { getSpanByOtelId(spanId: $spanId) { costSummary { total { cost } } } }"
LOG_FILE = "phoenix.log"
LOG_TAIL_CHARS = 3000


@dataclass(frozen=True, slots=True)
class Phoenix:
    """A running Phoenix: its base URL (UI, OTLP/HTTP and REST) and a few REST reads."""

    url: str

    def get(self, path: str, **query: Any) -> Any:
        """GET a REST path (`/v1/projects`) and return its decoded JSON."""
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        with urllib.request.urlopen(f"{self.url}{path}{suffix}", timeout=REQUEST_TIMEOUT_SECONDS) as response:
            return json.load(response)

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """POST a GraphQL query to Phoenix (what its UI reads) and return its `data`; errors raise."""
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise RuntimeError(f"Phoenix's GraphQL API answered {answer['errors']}")
        return dict(answer["data"])

    def span_cost(self, span_id: str) -> float | None:
        """The cost in USD Phoenix computed for a span (from its own price table), None if it has none.

        Phoenix ignores the `llm.cost.*` attributes: it prices `llm.token_count.*` by `llm.model_name`.
        """
        span = self.graphql(SPAN_COST_QUERY, spanId=span_id)["getSpanByOtelId"]
        summary = span and span["costSummary"]
        return None if not summary else summary["total"]["cost"]

    def project_id(self, project: str) -> str | None:
        """The id of the project named `project` (it exists once its first span arrived), else None."""
        for entry in self.get("/v1/projects")["data"]:
            if entry["name"] == project:
                return str(entry["id"])
        return None

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span Phoenix stored in `project`, as its REST API returns them (flat attributes)."""
        try:
            return list(self.get(f"/v1/projects/{urllib.parse.quote(project)}/spans", limit=SPAN_LIMIT)["data"])
        except urllib.error.HTTPError as error:
            if error.code == 404:  # no span has reached the project yet
                return []
            raise

    def wait_for_spans(self, project: str, count: int, timeout: float = INGEST_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
        """The project's spans once at least `count` are stored (Phoenix ingests in the background)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans(project)
            if len(spans) >= count:
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(f"Phoenix stored {len(spans)} of {count} spans in {project!r} after {timeout:.0f} s")
            time.sleep(POLL_SECONDS)

    def project_url(self, project: str) -> str:
        """The page listing the project's traces (the project must exist: wait for a span first)."""
        project_id = self.project_id(project)
        if project_id is None:
            raise LookupError(f"Phoenix has no project {project!r} yet; no span has reached it")
        return f"{self.url}/projects/{project_id}"

    def trace_url(self, project: str, trace_id: str) -> str:
        """The page of one trace: its span tree (waterfall) and the selected span's attributes."""
        return f"{self.project_url(project)}/traces/{trace_id}"

    def otlp_environment(self, project: str) -> dict[str, str]:
        """The standard OpenTelemetry variables that send an app's spans to this Phoenix, in `project`."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
            "OTEL_RESOURCE_ATTRIBUTES": f"{sc.OPENINFERENCE_PROJECT_NAME}={project}",
        }

    def show_until_interrupted(self, project: str, out: Callable[[str], None] = print) -> None:
        """Once a span of `project` is stored, print the page of its traces; then wait for Ctrl-C."""
        self.wait_for_spans(project, 1)
        out(f"\nThe traces in Phoenix: {self.project_url(project)}\nCtrl-C stops Phoenix.")
        try:
            while True:
                time.sleep(IDLE_SLEEP_SECONDS)
        except KeyboardInterrupt:
            out("\nstopping Phoenix")


def phoenix_environment(working_dir: Path, port: int, grpc_port: int) -> dict[str, str]:
    """Phoenix's settings: loopback ports, its own working directory, nothing fetched from outside."""
    return {
        "PHOENIX_WORKING_DIR": str(working_dir),
        "PHOENIX_HOST": HOST,
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }


@contextlib.contextmanager
def phoenix_server(
    working_dir: Path | None = None, on_wait: Callable[[float], None] | None = None
) -> Iterator[Phoenix]:
    """Run `.venv-phoenix/bin/phoenix serve` until the block exits; yield it once healthy.

    Its output goes to `phoenix.log` in the working directory, quoted in the error if it fails to start.
    """
    executable = phoenix_executable()
    with contextlib.ExitStack() as stack:
        if working_dir is None:
            working_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kvwise-phoenix-")))
        port = free_port()
        env = {**os.environ, **phoenix_environment(working_dir, port, free_port())}
        log_path = working_dir / LOG_FILE
        log = stack.enter_context(log_path.open("wb"))
        process = subprocess.Popen(
            [str(executable), "serve"], env=env, cwd=working_dir, stdout=log, stderr=subprocess.STDOUT
        )
        stack.callback(_stop, process)
        phoenix = Phoenix(f"http://{HOST}:{port}")
        wait_healthy(
            f"{phoenix.url}/healthz",
            process,
            lambda: f"Phoenix's log ({log_path}) ends:\n" + log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:],
            on_wait,
            timeout=STARTUP_TIMEOUT_SECONDS,
        )
        yield phoenix


def phoenix_executable() -> Path:
    """Phoenix's `phoenix` command, from its own venv, (re)built first by `make phoenix-venv` if missing or stale."""
    if subprocess.run([*MAKE_PHOENIX_VENV, "--question"], check=False).returncode != 0:
        print(f"building {PHOENIX_VENV.name} (Arize Phoenix, about 850 MB, once): make phoenix-venv", file=sys.stderr)
        subprocess.run(MAKE_PHOENIX_VENV, check=True)
    return PHOENIX_EXECUTABLE


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
