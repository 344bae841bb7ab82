"""Type checkers see the wrapped client as the client's own type: mypy on a small app."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".pytest_cache" / "mypy"  # ignored by git, kept between runs (a cold run takes a minute)
APP = """\
import anthropic
import openai
import sdk

client = sdk.wrap(openai.OpenAI())
client.chat.completions.create(modle="x", messages=[])
completion = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
reveal_type(completion)
reveal_type(sdk.wrap(anthropic.AsyncAnthropic()))
"""


def _mypy(app: Path) -> list[str]:
    """mypy's report on `app` alone (run from the repository root, so `sdk` is this checkout)."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(CACHE), str(app)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    # By file name, not path: with a warm cache mypy may report a module under the path it had last time.
    return [line.split(f"{app.name}:", 1)[1] for line in result.stdout.splitlines() if f"{app.name}:" in line]


def test_a_misspelled_keyword_on_a_wrapped_client_is_a_type_error_and_the_right_call_is_clean(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    report = _mypy(app)
    errors = [line for line in report if ": error:" in line]
    assert errors and all(line.startswith("6:") for line in errors), report
    assert any('"modle"' in line for line in errors)
    assert '8: note: Revealed type is "openai.types.chat.chat_completion.ChatCompletion"' in report
    assert '9: note: Revealed type is "anthropic._client.AsyncAnthropic"' in report


def test_the_package_ships_its_py_typed_marker():
    assert importlib.resources.files("sdk").joinpath("py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["sdk"]
    assert "py.typed" in package_data
