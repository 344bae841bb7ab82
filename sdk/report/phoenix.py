"""Spans from a running Arize Phoenix, by its REST API (`GET /v1/projects/{project}/spans/otlpv1`).

Phoenix answers OTLP-shaped spans in snake_case, newest first, a page at a time with a cursor; it
keeps no instrumentation scope, so `spans.calls` recognises kvwise's call spans by their attributes.
Only the standard library is used: the report needs no HTTP client of its own.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from sdk.report.spans import RawSpan, otlp_span

PAGE_SIZE = 1000
"""Spans per request: Phoenix's largest page."""
TIMEOUT_SECONDS = 60.0


class PhoenixError(RuntimeError):
    """Phoenix could not be read: not reachable, no such project, or an answer that is not spans."""


def read_phoenix(url: str, project: str, progress: Callable[[int, int], None] | None = None) -> list[RawSpan]:
    """Every span of `project` in the Phoenix at `url` (e.g. `http://127.0.0.1:6006`).

    `progress(spans_read, 0)` is called after each page (Phoenix does not say how many there are).
    """
    path = f"{url.rstrip('/')}/v1/projects/{urllib.parse.quote(project, safe='')}/spans/otlpv1"
    spans: list[RawSpan] = []
    cursor: str | None = None
    while True:
        query = {"limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
        page = _get(f"{path}?{urllib.parse.urlencode(query)}", project)
        spans.extend(otlp_span(span, "") for span in page.get("data") or ())
        if progress is not None:
            progress(len(spans), 0)
        cursor = page.get("next_cursor")
        if not cursor:
            return spans


def _get(url: str, project: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise PhoenixError(f"Phoenix has no project {project!r} (no span has reached it)") from error
        raise PhoenixError(f"Phoenix answered {error.code} to {url}: {error.read()[:300]!r}") from error
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise PhoenixError(f"could not read spans from Phoenix at {url}: {error}") from error
    if not isinstance(answer, dict):
        raise PhoenixError(f"Phoenix's answer to {url} is not a page of spans")
    return answer
