"""A model's chat template runs with bounds (issue 54 item 4): nested `range(100000)` loops pinned a
worker forever, recursion, `range(10**9)|list`, doubling a string or flooding output gave 500s, and a
3 GB constant was allocated at start-up. Each is now a 400 naming its bound, or a start-up refusal,
while `/health` and a normal chat are answered, and the server's memory stays within a stated bound
(strings each within the size bound, kept in a growing list, once took gigabytes); the sandbox
still stops attribute escapes, includes and mutation; a template naming `tools` only in a comment
no longer drops the offered tools."""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from tokenizers import Tokenizer

from local_backend import Engine
from local_backend.engine.engine_config import ConfigError
from local_backend.model.chat_template import TemplateBoundError
from local_backend.model.tokenizer import TextTokenizer
from local_backend.model.tool_prompt import Tool
from local_backend.server.tools import prompt_ids
from tests.local_backend.conftest import CHAT_TEMPLATE
from tests.local_backend.serving import Served, ServedEngines

ATTACKS = {
    "nested_ranges": (
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "iterations|time",
    ),
    "nested_list": (
        "{% set r = range(100000)|list %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}",
        "iterations|time",
    ),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion"),
    "huge_range": ("{{ range(10**9)|list }}", "size"),
    "doubling": (
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "size",
    ),
    "doubling_plus": (
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "size",
    ),
    "output_flood": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 100000 }}{% endfor %}{% endfor %}",
        "size",
    ),
    "huge_constant": ("{{ 'x' * 3000000000 }}", "size"),
    "huge_width": ("{{ 'x'|center(3000000000) }}{{ 'x'.ljust(3000000000) }}", "size"),
    "huge_join": ("{{ range(100000)|join('x' * 100000) }}", "size"),
    "huge_power": ("{{ 2 ** 1000000000 }}", "size"),
    "kept_strings": (
        "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + ['x' * 16000000] %}{% endfor %}",
        "size",
    ),
    "kept_in_a_dict": (
        "{% set ns = namespace(d={}) %}{% for i in range(1000) %}"
        "{% set ns.d = dict(ns.d, **{'k' ~ i: 'x' * 16000000}) %}{% endfor %}",
        "size",
    ),
    "kept_ranges": (
        "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}"
        "{% set ns.l = ns.l + [range(100000)|list] %}{% endfor %}",
        "size|time",
    ),
    "kept_slices": (
        "{% set s = 'x' * 16000000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
        "{% set ns.l = ns.l + [s[i:]] %}{% endfor %}",
        "size",
    ),
    "kept_splits": (
        "{% set s = 'ab ' * 5000000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
        "{% set ns.l = ns.l + [s.split(' ')] %}{% endfor %}",
        "size",
    ),
    "listed_chars": ("{{ ('\u0101' * 16000000)|list|length }}", "iterations|time"),
    "batched_chars": ("{{ ('x' * 16000000)|batch(1)|list|length }}", "iterations|time"),
}
"""Each hostile template (its body) and the bound it passes (`a|b`: a million cheap steps may meet the deadline
first on a busy machine)."""

ESCAPES = {
    "class_walk": (
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "access to attribute '__class__' of 'str' object is unsafe",
    ),
    "globals": (
        "{{ cycler.__init__.__globals__.os.environ }}",
        "access to attribute '__init__' of 'type' object is unsafe",
    ),
    "lipsum_globals": ("{{ lipsum.__globals__['os'].popen('id').read() }}", "'lipsum' is undefined"),
    "include": ("{% include '/etc/passwd' %}", "no loader for this environment specified"),
    "import": ("{% import 'os' as os %}", "no loader for this environment specified"),
    "append": (
        "{% set _ = messages.append({'role': 'system', 'content': 'x'}) %}",
        "access to attribute 'append' of 'list' object is unsafe",
    ),
    "update": (
        "{% set _ = messages[0].update({'content': 'x'}) %}",
        "access to attribute 'update' of 'dict' object is unsafe",
    ),
}
"""Sandbox escapes (attributes, includes, mutation of the caller's values) and the `chat template failed` 400 each
gets."""

HOSTILE_TEMPLATE = CHAT_TEMPLATE + "".join(
    f"{{% if attack == '{name}' %}}{body}{{% endif %}}" for name, (body, _) in (ATTACKS | ESCAPES).items()
)
"""The test model's template, doing one attack when a request's `chat_template_kwargs` names it."""

SERVING_PEAK_RSS = 1024**3
"""The stated memory bound of a server refusing hostile templates: the peak resident memory of its process (the
imports and the test model are about 0.3 GiB of it) after every attack of `ATTACKS`, two at a time."""

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=256, kv_cache_memory=2**20, chat_template=HOSTILE_TEMPLATE)


def _chat(url: str, **body: object) -> httpx2.Response:
    with httpx2.Client(base_url=url, timeout=120) as http:
        return http.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 2, "messages": HI, **body})


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_hostile_render_is_a_400_naming_its_bound(served, attack):
    response = _chat(served.url, chat_template_kwargs={"attack": attack})
    assert response.status_code == 400, response.text
    assert re.search(f"passed its ({ATTACKS[attack][1]}) bound", response.json()["error"]["message"])
    assert _chat(served.url).status_code == 200


@pytest.mark.parametrize("attack", list(ESCAPES))
def test_a_sandbox_escape_is_a_400_and_changes_nothing(served, attack):
    response = _chat(served.url, chat_template_kwargs={"attack": attack})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("chat template failed") and ESCAPES[attack][1] in message, message
    assert _chat(served.url).status_code == 200


@pytest.mark.parametrize(
    "body", ["{{ '{0.__class__}'.format('') }}", "{{ ''|attr('__class__') }}", "{{ ('x' ~ 'y').__class__ }}"]
)
def test_an_unsafe_attribute_read_another_way_renders_nothing(llama_dir, body):
    raw = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))
    plain = TextTokenizer(raw, {"bos_token": "<s>"}, CHAT_TEMPLATE)
    probing = TextTokenizer(raw, {"bos_token": "<s>"}, CHAT_TEMPLATE + body)
    assert probing.chat_prompt(HI) == plain.chat_prompt(HI)


def test_health_and_a_normal_chat_are_answered_while_hostile_renders_run(served):
    attacks = ["nested_ranges", "nested_list", "output_flood", "nested_ranges"]
    with concurrent.futures.ThreadPoolExecutor(len(attacks)) as pool:
        hostile = [pool.submit(_chat, served.url, chat_template_kwargs={"attack": a}) for a in attacks]
        with httpx2.Client(base_url=served.url, timeout=120) as http:
            health = [http.get("/health").status_code for _ in range(5)]
        normal = _chat(served.url)
        statuses = [f.result().status_code for f in hostile]
    assert health == [200] * 5 and normal.status_code == 200
    assert set(statuses) <= {400, 429}  # 429: both workers and the offload queue were busy
    assert 400 in statuses


@pytest.mark.parametrize("attack", ["nested_ranges", "recursion", "huge_constant", "output_flood"])
def test_a_template_failing_its_probe_render_is_refused_at_start_up(llama_dir, attack):
    body, bound = ATTACKS[attack]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError, match=f"passed its ({bound}) bound") as refused:
        Engine.from_pretrained(
            llama_dir, device="cpu", max_model_len=256, kv_cache_memory=2**20, chat_template=CHAT_TEMPLATE + body
        )
    assert refused.value.field == "chat_template"
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024  # ru_maxrss is in KiB on Linux
    assert grown < 2**30  # the 3 GB constant is never built (Jinja no longer folds it as it compiles)


def test_the_bound_error_names_its_bound(llama_dir):
    raw = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))
    with pytest.raises(TemplateBoundError) as refused:
        TextTokenizer(raw, {}, CHAT_TEMPLATE + ATTACKS["huge_power"][0])
    assert refused.value.bound == "size"


def test_a_template_naming_tools_only_in_a_comment_gets_them_folded_in(llama_dir):
    raw = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))
    tokenizer = TextTokenizer(raw, {"bos_token": "<s>", "eos_token": "</s>"}, "{# no tools here #}" + CHAT_TEMPLATE)
    assert not tokenizer.renders_tools
    tool = Tool("get_weather", "Weather of a city", {"type": "object", "properties": {"city": {"type": "string"}}})
    text = tokenizer.decode(prompt_ids(tokenizer, HI, [tool]))
    assert '"name": "get_weather"' in text and "<tools>" in text


@contextlib.contextmanager
def _cli_server(llama_dir: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`python -m local_backend serve` of the test model with `HOSTILE_TEMPLATE`: its process and URL; it must
    exit 0 on the one SIGTERM sent as the block ends."""
    template = tmp_path / "hostile.jinja"
    template.write_text(HOSTILE_TEMPLATE)
    command = [
        sys.executable,
        "-m",
        "local_backend",
        "serve",
        "--model",
        str(llama_dir),
        "--port",
        "0",
        "--kv-cache-memory",
        str(2**21),
        "--served-model-name",
        "tiny",
        "--chat-template",
        str(template),
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline()
            port = re.search(r"ready at http://127\.0\.0\.1:(\d+) ", line)
            assert port is not None, line + process.stderr.read()
            yield process, f"http://127.0.0.1:{port[1]}"
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0


def _peak_rss(pid: int) -> int:
    """The peak resident bytes of live process `pid` (`VmHWM`: its own, from its exec on)."""
    [line] = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def test_sigterm_stops_the_server_while_hostile_renders_run(llama_dir, tmp_path):
    """Two nested-loop renders once held both workers forever, and SIGTERM no longer stopped the server."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with _cli_server(llama_dir, tmp_path) as (_, url):
            hostile = [pool.submit(_chat, url, chat_template_kwargs={"attack": "nested_ranges"}) for _ in range(2)]
            assert [f.result().status_code for f in hostile] == [400, 400]
            assert _chat(url).status_code == 200
            again = [pool.submit(_chat_or_gone, url) for _ in range(2)]  # in flight when the block's SIGTERM comes
        [f.result() for f in again]


def test_a_server_refusing_every_hostile_template_stays_within_its_memory_bound(llama_dir, tmp_path):
    """Four renders once took 4.5 GB each and kept 3.5 GB; strings kept in a growing list took all there was.
    The attacks come two at a time, as the server's `OFFLOAD_WORKERS` render them."""
    with _cli_server(llama_dir, tmp_path) as (process, url), concurrent.futures.ThreadPoolExecutor(2) as pool:
        codes = pool.map(lambda attack: _chat(url, chat_template_kwargs={"attack": attack}).status_code, ATTACKS)
        statuses = dict(zip(ATTACKS, codes, strict=True))
        with httpx2.Client(base_url=url) as http:
            health = http.get("/health").status_code
        normal = _chat(url).status_code
        peak = _peak_rss(process.pid)
    assert statuses == dict.fromkeys(ATTACKS, 400)
    assert health == normal == 200
    assert 0 < peak < SERVING_PEAK_RSS, peak


def _chat_or_gone(url: str) -> int:
    try:
        return _chat(url, chat_template_kwargs={"attack": "nested_ranges"}).status_code
    except httpx2.HTTPError:  # the server stopped first
        return 0
