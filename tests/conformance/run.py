"""The conformance tier: openai's and anthropic's own test suites, with every client they build wrapped.

    python -m tests.conformance.run                      # the tier (`make test-conformance`): both packages
    python -m tests.conformance.run openai -- tests/test_client.py -k retries          # a selection, wrapped
    python -m tests.conformance.run --bare openai -- tests/test_client.py -k retries   # the same, bare
    python -m tests.conformance.run --bare openai        # the whole suite bare (the time to compare with)

The suites are the `tests/` of the sdists of exactly the installed releases, fetched with pip into
`.cache/conformance/` once per release (so the project's own `pytest` never collects them), and run in
their own folder under their own pytest settings, with `kvwise_wrap_plugin` (this folder) loaded.
`tests/api_resources` is left out: its tests talk to a Prism mock server of the API, which is not here.

The tier runs each suite wrapped, then runs the tests that failed bare, in the same way: a test that
fails bare too fails for its environment (a tool or network it lacks), not for kvwise, and is
skipped by that rule. A test that fails only wrapped is run once more, wrapped and alone (a failure
that passes then came from the order of a parallel run, and is printed as such); one that fails
again fails the tier unless `differences.toml` names it, with the reason (kvwise's advertised body
rewrites alone), or `still_open.toml` does: a wrapped-only failure kvwise still owes a fix, named
so the tier keeps every other test from breaking while that fix is made. Both lists print what they
name that now passes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import subprocess
import sys
import tarfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.conformance import kvwise_wrap_plugin

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "conformance"
DIFFERENCES = HERE / "differences.toml"
STILL_OPEN = HERE / "still_open.toml"
LEFT_OUT = ("tests/api_resources",)
"""Needs a mock server of the API (Prism), which the tier does not run."""


@dataclass(frozen=True)
class Outcome:
    """One pytest run's outcome, as `kvwise_wrap_plugin` wrote it."""

    failed: dict[str, str]
    passed: int
    skipped: int
    seconds: float

    @classmethod
    def read(cls, path: Path) -> Outcome:
        return cls(**json.loads(path.read_text()))


def suite(package: str) -> Path:
    """The unpacked sdist of the installed `package` (fetched once per release)."""
    version = importlib.metadata.version(package)
    folder = CACHE / f"{package}-{version}"
    if not (folder / "tests").is_dir():
        sdists = CACHE / "sdists"
        sdists.mkdir(parents=True, exist_ok=True)
        archive = sdists / f"{package}-{version}.tar.gz"
        if not archive.exists():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    f"{package}=={version}",
                    "--dest",
                    str(sdists),
                ],
                check=True,
            )
        with tarfile.open(archive) as tar:
            tar.extractall(CACHE, filter="data")
    return folder


def pytest(folder: Path, args: list[str], *, bare: bool, results: Path | None = None) -> int:
    """pytest in a suite's `folder` with the plugin loaded; its exit status."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        kvwise_wrap_plugin.__name__.rpartition(".")[2],
        "-p",
        "no:cacheprovider",
        *(f"--ignore={path}" for path in LEFT_OUT),
    ]
    if bare:
        command.append("--kvwise-bare")
    if results is not None:
        command.append(f"--kvwise-results={results}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    started, cpu = time.monotonic(), _children_cpu()
    returncode = subprocess.run([*command, *args], cwd=folder, env=env).returncode
    print(
        f"{folder.name} {'bare' if bare else 'wrapped'}: {time.monotonic() - started:.0f} s, "
        f"{_children_cpu() - cpu:.0f} CPU s",
        flush=True,
    )
    return returncode


def _children_cpu() -> float:
    """CPU seconds of the finished child processes (pytest and its xdist workers): a figure that a
    busy machine moves less than the wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def differences() -> dict[str, dict[str, str]]:
    """package -> test id -> why it differs wrapped (`differences.toml`)."""
    listed: dict[str, dict[str, str]] = {}
    for entry in tomllib.loads(DIFFERENCES.read_text()).get("difference", []):
        listed.setdefault(entry["package"], {})[entry["test"]] = entry["reason"]
    return listed


def still_open() -> dict[str, dict[str, str]]:
    """package -> test file or test id -> what kvwise still does wrong there (`still_open.toml`)."""
    listed: dict[str, dict[str, str]] = {}
    for entry in tomllib.loads(STILL_OPEN.read_text()).get("open", []):
        listed.setdefault(entry["package"], {})[entry["tests"]] = entry["breaks"]
    return listed


def _open_entry(test: str, listed: dict[str, str]) -> str | None:
    """The entry of `listed` that names `test`: a test file holds all its tests, a test id itself."""
    return next((entry for entry in listed if test == entry or test.startswith((f"{entry}::", f"{entry}["))), None)


def tier(package: str, workers: str) -> list[str]:
    """Run `package`'s suite wrapped, then its wrapped failures bare; the failures kvwise is to blame for."""
    results = CACHE / "results"
    results.mkdir(parents=True, exist_ok=True)
    wrapped_file, bare_file = results / f"{package}-wrapped.json", results / f"{package}-bare.json"
    pytest(suite(package), ["-q", "-n", workers], bare=False, results=wrapped_file)
    wrapped = Outcome.read(wrapped_file)
    rerun = sorted(set(wrapped.failed) - {kvwise_wrap_plugin.SENTINEL})
    bare_failed: dict[str, str] = {}
    if rerun:
        selection = results / f"{package}-rerun.txt"
        selection.write_text("\n".join(rerun) + "\n")
        pytest(suite(package), ["-q", "-n", workers, f"@{selection}"], bare=True, results=bare_file)
        bare_failed = Outcome.read(bare_file).failed
    listed, owed = differences().get(package, {}), still_open().get(package, {})
    only_wrapped = {test: error for test, error in wrapped.failed.items() if test not in bare_failed}
    unlisted = sorted(
        test for test in only_wrapped if _listed(test, listed) is None and _open_entry(test, owed) is None
    )
    again: dict[str, str] = {}
    if unlisted:
        selection = results / f"{package}-again.txt"
        selection.write_text("\n".join(unlisted) + "\n")
        again_file = results / f"{package}-again.json"
        pytest(suite(package), ["-q", "-n", "0", f"@{selection}"], bare=False, results=again_file)
        again = Outcome.read(again_file).failed
    blamed = [f"{test}: {only_wrapped[test]}" for test in unlisted if test in again]
    in_open = [test for test in only_wrapped if _open_entry(test, owed) is not None]
    print(
        f"\n{package} {importlib.metadata.version(package)}: {wrapped.passed} passed wrapped "
        f"in {wrapped.seconds:.0f} s; {len(bare_failed)} failed bare too (skipped: their environment); "
        f"{len(only_wrapped) - len(unlisted) - len(in_open)} listed in {DIFFERENCES.name}; "
        f"{len(in_open)} still open ({STILL_OPEN.name}); {len(unlisted) - len(blamed)} passed wrapped when run "
        f"again alone; {len(blamed)} failed only wrapped"
    )
    for test in sorted(set(unlisted) - set(again)):
        print(f"  failed wrapped in the parallel run, passed alone: {test}")
    for entry in sorted(set(listed) - {_listed(test, listed) for test in only_wrapped}):
        print(f"  listed but passing wrapped (drop it from {DIFFERENCES.name}?): {entry}")
    for entry in sorted(set(owed) - {_open_entry(test, owed) for test in in_open}):
        print(f"  still open but passing wrapped (drop it from {STILL_OPEN.name}): {entry}")
    return blamed


def _listed(test: str, listed: dict[str, str]) -> str | None:
    """The entry of `listed` that names `test`: its id, or its function's (all its parametrizations)."""
    for entry in (test, test.partition("[")[0]):
        if entry in listed:
            return entry
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, selection = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, None)
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.run", description=__doc__.split("\n\n")[0])
    # No `choices`: argparse 3.11 checks an empty `nargs="*"` list against them as one value, and refuses it.
    parser.add_argument("packages", nargs="*", help=f"any of {', '.join(kvwise_wrap_plugin.PACKAGES)} (default: all)")
    parser.add_argument("--bare", action="store_true", help="leave the clients bare")
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers (-n), default auto")
    options = parser.parse_args(own)
    if unknown := sorted(set(options.packages) - set(kvwise_wrap_plugin.PACKAGES)):
        parser.error(f"unknown package(s) {', '.join(unknown)}: choose from {', '.join(kvwise_wrap_plugin.PACKAGES)}")
    packages = options.packages or list(kvwise_wrap_plugin.PACKAGES)
    if selection is not None or options.bare:
        args = ["-n", "0", *selection] if selection is not None else ["-q", "-n", options.workers]
        return max(pytest(suite(package), args, bare=options.bare) for package in packages)
    started = time.monotonic()
    blamed = {package: tier(package, options.workers) for package in packages}
    print(f"\nconformance tier: {time.monotonic() - started:.0f} s")
    for package, failures in blamed.items():
        for failure in failures:
            print(f"FAILED only wrapped ({package}): {failure}")
    return 1 if any(blamed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
