"""Headless Chromium (Debian's `chromium`, installed by `make test`) rendering a page for the browser tests."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

BROWSER = "chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Headless on a closed network: no background connections, no sandbox (root in CI), no GPU."""
RENDER_BUDGET_MS = 20_000
"""Virtual time the page gets to run its scripts and queries before the DOM or screenshot is taken."""
WINDOW_SIZE = "1600,1000"
BROWSER_TIMEOUT_S = 120
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser() -> str:
    path = shutil.which(BROWSER)
    if path is None:
        pytest.fail(f"no `{BROWSER}` on PATH: install Debian's (`apt-get install -y chromium`, as `make test` does)")
    return path


def render(browser: str, url: str, profile: Path, *output: str, window_size: str = WINDOW_SIZE) -> str:
    """Run headless Chromium on `url` with a fresh profile; return its stdout (the DOM with --dump-dom)."""
    command = [
        browser,
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={RENDER_BUDGET_MS}",
        f"--window-size={window_size}",
        *output,
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


LAYOUT_PROBE = """<script>addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const overflowing = [];
  for (const element of document.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    const spills = element.clientWidth > 0 && element.scrollWidth > element.clientWidth + 1;
    if (box.right > width + 0.5 || box.left < -0.5 || spills) {
      overflowing.push(`<${element.tagName.toLowerCase()}> ${Math.round(box.left)}..${Math.round(box.right)}: `
                       + (element.textContent || element.getAttribute("alt") || "").slice(0, 80));
    }
  }
  const images = Object.fromEntries([...document.images].map(image => [image.alt, image.naturalWidth]));
  const probe = document.createElement("pre");
  probe.id = "layout-probe";
  probe.textContent = JSON.stringify({width, page: document.documentElement.scrollWidth, overflowing, images});
  document.body.append(probe);
});</script>"""
"""Measures, once the page has loaded, every element against the page's width, and the images' sizes."""
PROBE_RESULT = re.compile(r'<pre id="layout-probe">(.*?)</pre>', re.S)


@dataclass(frozen=True, slots=True)
class Layout:
    """What the probe measured: the page's width, its scroll width, what spills past the page or its own
    box (`<tag> left..right: text`), and each image's decoded width by its alt text (0: not drawn)."""

    width: int
    page: int
    overflowing: list[str]
    images: dict[str, int]


def layout(browser: str, page: Path, profile: Path, window_size: str = WINDOW_SIZE) -> Layout:
    """Render a local HTML `page` with the layout probe added (to a copy beside it) and return its measures."""
    probed = page.with_name(f"{page.stem}.probed.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", f"{LAYOUT_PROBE}</body>"), encoding="utf-8")
    dom = render(browser, probed.as_uri(), profile, "--dump-dom", window_size=window_size)
    found = PROBE_RESULT.search(dom)
    assert found is not None, "the layout probe did not run"
    return Layout(**json.loads(html.unescape(found[1])))
