"""A process's first wrapped call imports no more than it needs (no timed assertion: which modules).

`make bench` (`bench_sdk_first_call`) times it; these name the imports that made the first wrapped
`responses.create` cost ~4x the bare client's: the beta API's ~480 type modules, the other
client package, the stream guard for a call that does not stream.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALLS = {
    "chat": 'client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])',
    "responses": 'client.responses.create(model="gpt-4.1", input="hi")',
    "completions": 'client.completions.create(model="gpt-4.1", prompt="hi")',
}
NOT_LOADED = ("openai.types.beta", "anthropic", "sdk.send.stream_watch", "sdk.decode.loop_guard", "wrapt")


def _loaded_after_first_call(base_url: str, call: str) -> list[str]:
    code = (  # what the bare client's own call loads (openai 2.x imports its beta types) is not kvwise's
        "import json, sys, openai\n"
        f"client = openai.OpenAI(base_url={base_url!r}, api_key='k')\n"
        f"{call}\n"
        f"bare = [name for name in {NOT_LOADED!r} if name in sys.modules]\n"
        "import sdk\n"
        f"client = sdk.wrap(openai.OpenAI(base_url={base_url!r}, api_key='k'))\n"
        f"{call}\n"
        f"print(json.dumps([name for name in {NOT_LOADED!r} if name in sys.modules and name not in bare]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("api", sorted(CALLS))
def test_the_first_wrapped_call_of_a_process_loads_neither_the_beta_types_nor_anthropic_nor_the_stream_guard(
    simulator, api
):
    assert _loaded_after_first_call(simulator.openai_base_url, CALLS[api]) == []
