"""Builds one venv of older clients for `make test-compat`: `python -m tests.compat_venv .venv-compat-openai2.54.0-...`.

`python -m tests.compat_venv DIR openai==2.54.0 anthropic==0.125.0 crewai==1.15.30` installs the requirements
given instead (`make test-frameworks`: the frameworks that pin older clients, with the clients they resolve).

The directory's name says the pins (`openai2.54.0-anthropic1.17.0` is `openai==2.54.0 anthropic==1.17.0`).
The venv holds only those clients and what they need that the project venv lacks; a `.pth` file puts the
project venv's site-packages (kvwise's editable install, pytest, the OpenTelemetry SDK, ...) behind its
own, so the older clients shadow the newest and nothing else is installed twice. pip sees the project
venv's packages as installed and never touches them (they lie outside its environment). The build fails
unless the venv imports the pinned releases.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

_PIN = re.compile(r"([a-z_]+)(\d[\w.]*)")
_PTH_FILE = "kvwise-project-venv.pth"
_CLIENTS = ("openai", "anthropic")
_PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def pins(directory: Path) -> dict[str, str]:
    """The releases a compat venv's name pins: `.venv-compat-openai1.109.1-anthropic0.125.0` ->
    {"openai": "1.109.1", "anthropic": "0.125.0"}."""
    found = dict(_PIN.fullmatch(part).groups() for part in directory.name.split("-compat-", 1)[1].split("-"))  # type: ignore[union-attr]
    if not found:
        raise SystemExit(f"{directory.name} names no pins (expected .venv-compat-openai2.54.0-anthropic1.17.0)")
    return found


def build(directory: Path, requirements: list[str] | None = None) -> None:
    """Build the venv at `directory` afresh with `requirements` (by default the clients its name pins),
    then touch its `.installed` stamp; the build fails unless it imports the clients pinned."""
    if requirements:
        wanted = dict(req.split("==", 1) for req in requirements if req.split("==", 1)[0] in _CLIENTS)
    else:
        wanted = pins(directory)
        requirements = [f"{name}=={version}" for name, version in wanted.items()]
    shutil.rmtree(directory, ignore_errors=True)
    venv.create(directory, with_pip=True)
    python = str(directory / "bin" / "python")
    own = Path(subprocess.run([python, "-c", _PURELIB], check=True, capture_output=True, text=True).stdout.strip())
    project = sysconfig.get_paths()["purelib"]  # this interpreter is the project venv's
    (own / _PTH_FILE).write_text(f"import site; site.addsitedir({project!r})\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
        check=True,
    )
    shown = subprocess.run(
        [python, "-c", f"import {', '.join(wanted)}; print({', '.join(f'{n}.__version__' for n in wanted)})"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if shown != list(wanted.values()):
        raise SystemExit(f"{directory} imports {shown}, not the pinned {list(wanted.values())}")
    (directory / ".installed").touch()


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2:])
