"""The loop guard's detector: cuts runaway prose within 3 periods, never realistic or repetitive answers."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.decode.loop_guard import Loop, LoopDetector
from sdk.decode.repetition import is_structured, wants_structured_output
from tests.sdk.decode.loop_corpus import (
    LEGITIMATE,
    RUNAWAY_PROSE,
    RUNAWAY_SHORT,
    RUNAWAY_SPECIAL_TOKENS,
    STRUCTURED_RUNAWAY,
)
from tests.simulator.tokens import tokenize

PROSE = """\
Prefill and decode stress a GPU in different ways. Prefill processes the whole prompt at once, so it
is bound by compute: the matrix multiplications are large and the tensor cores stay busy. Decode
produces one token per step for each sequence, so it is bound by memory bandwidth: every step reads
all the weights and the whole KV cache to produce a handful of numbers. That is why batching helps
decode so much more than prefill, and why a long shared prefix is worth caching. When the cache hits,
the server skips the prefill of the cached part entirely, and the first token arrives sooner. When it
misses, the server pays again for work it has already done, often many times a minute.
"""

NUMBERED_LIST = """\
Steps to reproduce:
1. Install the package with `pip install kvwise`.
2. Wrap the client: `client = sdk.wrap(openai.OpenAI())`.
3. Send the same system prompt twice, one minute apart.
4. Compare `usage.prompt_tokens_details.cached_tokens` on both responses.
5. Open the trace and look at the `prefill` span of each call.
6. Repeat with the unwrapped client and note the difference.
7. Repeat with a system prompt that starts with a timestamp.
8. Repeat with the tools shuffled between the calls.
9. Write down the cached tokens of every call in a table.
10. Share the table and the traces in the issue.
"""

BULLETS = """\
Checklist before the release:
- [ ] the changelog lists every user-visible change
- [ ] the changelog lists every deprecation
- [ ] the version is bumped in pyproject.toml
- [ ] the version is bumped in the docs
- [x] the tests pass on Linux
- [x] the tests pass on macOS
- [ ] the tests pass on Windows
- [ ] the wheels are built for every platform
- [ ] the wheels are uploaded to the test index
- [ ] the release notes are reviewed by a second person
"""

PYTHON_CODE = """\
class Settings:
    def __init__(self, host, port, user, password, database, timeout, retries, pool_size):
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.timeout = timeout
        self.retries = retries
        self.pool_size = pool_size


DEFAULTS = {
    "host_primary": "localhost",
    "host_secondary": "localhost",
    "host_tertiary": "localhost",
    "port_primary": 5432,
    "port_secondary": 5433,
    "port_tertiary": 5434,
    "timeout_connect": 10,
    "timeout_read": 30,
    "timeout_write": 30,
}
ZEROS = [0, 0, 0, 0, 0, 0, 0, 0]
# ================================================================================
"""

JS_CODE = """\
export function summarise(rows) {
  const totals = { input: 0, output: 0, cached: 0, written: 0 };
  for (const row of rows) {
    totals.input += row.input ?? 0;
    totals.output += row.output ?? 0;
    totals.cached += row.cached ?? 0;
    totals.written += row.written ?? 0;
  }
  // -------------------------------------------------------------------------------
  return {
    ...totals,
    hitRatio: totals.input ? totals.cached / totals.input : 0,
    cost: price(totals.input, totals.output, totals.cached, totals.written),
  };
}
"""

MARKDOWN_TABLE = """\
| model            | input tokens | cached tokens | output tokens | cost (USD) |
|------------------|--------------|---------------|---------------|------------|
| gpt-4o           | 12,480       | 11,264        | 512           | 0.0213     |
| gpt-4o-mini      | 12,480       | 11,264        | 498           | 0.0013     |
| claude-sonnet-4  | 12,502       | 12,288        | 530           | 0.0134     |
| claude-haiku-4   | 12,502       | 12,288        | 515           | 0.0036     |
| local (default)  | 12,480       | 12,416        | 512           | 0.0000     |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
"""

JSON_ARRAY = """\
[
  {"id": 1, "name": "prefill", "start_ms": 0, "end_ms": 184, "tokens": 12480, "cached": 11264},
  {"id": 2, "name": "decode", "start_ms": 184, "end_ms": 2210, "tokens": 512, "cached": 0},
  {"id": 3, "name": "prefill", "start_ms": 2400, "end_ms": 2452, "tokens": 12480, "cached": 12288},
  {"id": 4, "name": "decode", "start_ms": 2452, "end_ms": 4431, "tokens": 498, "cached": 0},
  {"id": 5, "name": "prefill", "start_ms": 4600, "end_ms": 4647, "tokens": 12480, "cached": 12288}
]
"""

POEM = """\
The kettle sings upon the stove,
and rain is tapping at the pane;
the morning comes, the morning goes,
and I am waiting here again.

The letters pile beside the door,
the clock keeps counting down the rain;
the morning comes, the morning goes,
and I am waiting here again.

The garden sleeps beneath the snow,
the lamps are lit along the lane;
the morning comes, the morning goes,
and I am waiting here again.
"""

SEPARATORS = f"""\
{"=" * 80}
Section 1
{"-" * 79}
Some text under the first heading, with an array [0, 0, 0, 0, 0, 0, 0, 0] and a rule below.
{"*" * 60}
| a | b | c | d | e | f |
|---|---|---|---|---|---|
| 1 | 2 | 3 | 4 | 5 | 6 |
{"#" * 120}
hahaha, ha ha ha, no no no no no, very very very very good.
{"~" * 100}
"""

ZERO_ROW = "    [0, 0, 0, 0, 0, 0, 0, 0],\n"
MATRIX = f"""\
identity = np.eye(4)
zeros = np.array([
{ZERO_ROW * 8}])
defaults = (None, None, None, None, None, None)
"""

REALISTIC = {
    "prose": PROSE,
    "numbered list": NUMBERED_LIST,
    "bullets": BULLETS,
    "python code": PYTHON_CODE,
    "js code": JS_CODE,
    "markdown table": MARKDOWN_TABLE,
    "json array": JSON_ARRAY,
    "poem with refrain": POEM,
    "separators and short arrays": SEPARATORS,
    "matrix of zeros": MATRIX,
}


def random_chunks(text: str, seed: int) -> list[str]:
    """Chunks of 1 to 20 characters."""
    rng = random.Random(seed)
    chunks: list[str] = []
    while (fed := sum(map(len, chunks))) < len(text):
        chunks.append(text[fed : fed + rng.randint(1, 20)])
    return chunks


def token_chunks(text: str, seed: int) -> list[str]:
    """One token per chunk, as OpenAI streams (the simulator's tokenizer: a word or a punctuation mark)."""
    return tokenize(text)


def burst_chunks(text: str, seed: int) -> list[str]:
    """1 to 6 tokens per chunk, as Anthropic and busy servers batch them."""
    rng = random.Random(seed)
    tokens = tokenize(text)
    chunks: list[str] = []
    while tokens:
        size = rng.randint(1, 6)
        chunks.append("".join(tokens[:size]))
        del tokens[:size]
    return chunks


CHUNKINGS: dict[str, Callable[[str, int], list[str]]] = {
    "random": random_chunks,
    "tokens": token_chunks,
    "bursts": burst_chunks,
}


def feed_chunks(detector: LoopDetector, chunks: list[str]) -> tuple[int, Loop, str] | None:
    """Feed `chunks` in order; on a trip return (characters fed, the loop, the chunk that tripped it)."""
    fed = 0
    for chunk in chunks:
        fed += len(chunk)
        if (loop := detector.feed(chunk)) is not None:
            return fed, loop, chunk
    return None


def feed_in_chunks(detector: LoopDetector, text: str, seed: int) -> tuple[int, Loop] | None:
    """Feed `text` in random chunks of 1 to 20 characters; return (characters fed, loop) on a trip."""
    tripped = feed_chunks(detector, random_chunks(text, seed))
    return None if tripped is None else tripped[:2]


def really_repeats(loop: Loop, text: str) -> bool:
    """Whether some rotation of the reported unit occurs `repeats` times back-to-back in `text`."""
    rotations = (loop.unit[j:] + loop.unit[:j] for j in range(len(loop.unit)))  # the unit is shown rotated
    return loop.chars == len(loop.unit) * loop.repeats and any(r * loop.repeats in text for r in rotations)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("name", REALISTIC)
def test_realistic_text_never_trips_the_detector(name: str, seed: int) -> None:
    assert feed_in_chunks(LoopDetector(), REALISTIC[name], seed) is None


@pytest.mark.parametrize("seed", range(5))
def test_all_realistic_texts_in_one_stream_never_trip_the_detector(seed: int) -> None:
    assert feed_in_chunks(LoopDetector(), "\n".join(REALISTIC.values()), seed) is None


def test_the_legitimate_corpus_holds_at_least_30_answers_that_repeat_back_to_back() -> None:
    repeating = [name for name, answer in LEGITIMATE.items() if re.search(r"(.{8,}?)\1\1", answer.text, re.S)]
    assert len(repeating) >= 30, repeating


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", LEGITIMATE)
def test_legitimate_repetitive_answers_are_never_cut(name: str, chunking: str, seed: int) -> None:
    answer = LEGITIMATE[name]
    detector = LoopDetector(structured_output=answer.structured_output)
    assert feed_chunks(detector, CHUNKINGS[chunking](answer.text, seed)) is None


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", RUNAWAY_PROSE)
def test_runaway_prose_is_cut_within_3_periods_of_the_loop_starting(name: str, chunking: str, seed: int) -> None:
    runaway = RUNAWAY_PROSE[name]
    tripped = feed_chunks(
        LoopDetector(structured_output=runaway.structured_output), CHUNKINGS[chunking](runaway.text, seed)
    )
    assert tripped is not None
    fed, loop, chunk = tripped
    period = len(runaway.unit)
    assert fed - len(chunk) < len(runaway.head) + 3 * period  # the tripping chunk began within the third copy
    assert loop.repeats >= 3 and len(loop.unit) <= period
    assert really_repeats(loop, runaway.text[:fed])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", RUNAWAY_SHORT)
def test_units_with_few_letters_are_cut_only_after_a_long_span(name: str, seed: int) -> None:
    runaway = RUNAWAY_SHORT[name]
    tripped = feed_chunks(LoopDetector(structured_output=runaway.structured_output), random_chunks(runaway.text, seed))
    assert tripped is not None
    fed, loop, chunk = tripped
    assert loop.unit == runaway.unit
    assert loop.chars >= 150
    assert fed - len(chunk) < len(runaway.head) + 480


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", RUNAWAY_SPECIAL_TOKENS)
def test_a_leaked_special_token_repeating_is_cut_like_prose_not_followed_like_a_record(
    name: str, chunking: str
) -> None:
    runaway = RUNAWAY_SPECIAL_TOKENS[name]
    tripped = feed_chunks(LoopDetector(), CHUNKINGS[chunking](runaway.text, 0))
    assert tripped is not None
    fed, loop, chunk = tripped
    assert fed - len(chunk) < len(runaway.head) + 480
    assert sorted(loop.unit) == sorted(runaway.unit)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("name", STRUCTURED_RUNAWAY)
def test_a_record_repeated_without_end_is_cut_after_64_copies_and_4096_characters(name: str, chunking: str) -> None:
    runaway = STRUCTURED_RUNAWAY[name]
    tripped = feed_chunks(
        LoopDetector(structured_output=runaway.structured_output), CHUNKINGS[chunking](runaway.text, 0)
    )
    assert tripped is not None
    fed, loop, chunk = tripped
    required = max(64 * len(runaway.unit), 4096)
    assert required <= fed - len(runaway.head) < required + len(runaway.unit) + len(chunk)
    assert loop.repeats >= 64 and sorted(loop.unit) == sorted(runaway.unit)
    assert really_repeats(loop, runaway.text[:fed])


UNITS = [
    # (unit, under structured output, reads as records)
    ('{"id": 7, "status": "ok"},\n', False, True),
    ("| pending | not started |\n", False, True),
    ("2024-05-01 12:00:00 WARN pool exhausted\n", False, True),
    ("[ERROR] connection refused\n", False, True),
    ("ERROR connection refused by the upstream service\n", False, True),
    ("model.add(Dense(64, activation='relu'))\n", False, True),
    ("    return visit(node.parent)\n", False, True),
    ("N/A,N/A,unknown\n", False, True),
    ("key=value other=thing ", False, True),
    ("<li>Pending review</li>", False, True),
    ("- Not applicable here\n", False, True),
    ("status: waiting for approval\n", False, True),
    ("curl --fail https://example.com/health\n", False, True),
    ('"needs_review", ', True, True),
    ("0.0, ", True, True),
    ("null, ", True, True),
    ("I am sorry about it. ", False, False),
    ("I will keep repeating this sentence.\n", False, False),
    ("- Clear the cache and restart the server.\n", False, False),
    ("Here is the final answer to your question\n", False, False),
    ("Well, as I said, the prefix must be identical. ", True, False),
    ("I am not sure about this part: the cache. ", True, False),
    ("0, ", False, False),
    ("\n ", True, False),
    ("\n\n", False, False),
    ("}", True, False),
    ("|", False, False),
    ("<|im_end|>", False, False),
    ("</s>\n", False, False),
    ("[PAD] ", False, False),
]


@pytest.mark.parametrize(("unit", "structured_output", "expected"), UNITS)
def test_a_repeating_unit_reads_as_records_or_prose(unit: str, structured_output: bool, expected: bool) -> None:
    assert is_structured(unit, structured_output) is expected
    rotated = unit[len(unit) // 2 :] + unit[: len(unit) // 2]
    assert is_structured(rotated, structured_output) is expected  # where the period starts does not matter


SCHEMA = {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}
PARAMS = [
    ({"response_format": {"type": "json_object"}}, True),
    ({"response_format": SCHEMA}, True),
    ({"response_format": {"type": "text"}}, False),
    ({"response_format": dict}, True),  # a class, as `parse` takes
    ({"text": {"format": {"type": "json_schema", "name": "out", "schema": {}}}}, True),
    ({"text": {"format": {"type": "text"}}}, False),
    ({"text_format": dict}, True),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}}}}, True),
    ({"output_config": {"effort": "low"}}, False),
    ({"output_format": {"type": "json_schema", "schema": {}}}, True),
    ({"extra_body": {"response_format": {"type": "json_object"}}}, True),
    ({"temperature": 0}, False),
    ({}, False),
]


@pytest.mark.parametrize(("params", "expected"), PARAMS)
def test_structured_output_is_read_from_every_api_s_parameters(params: dict, expected: bool) -> None:
    assert wants_structured_output(params) is expected


@pytest.mark.parametrize(
    ("api", "kwargs"),
    [
        (
            Api.CHAT,
            {"model": "m", "messages": [{"role": "user", "content": "q"}], "response_format": {"type": "json_object"}},
        ),
        (Api.RESPONSES, {"model": "m", "input": "q", "text": {"format": {"type": "json_object"}}}),
        (
            Api.MESSAGES,
            {
                "model": "m",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "q"}],
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            },
        ),
    ],
)
def test_the_detector_made_for_a_json_call_lets_a_long_json_array_through(api: Api, kwargs: dict) -> None:
    array = "[" + "0, " * 400 + "0]"
    call = adapter_for(api).to_call(dict(kwargs), Provider.OPENAI)
    assert feed_in_chunks(LoopDetector.for_call(call), array, seed=1) is None
    plain = adapter_for(api).to_call(
        {k: v for k, v in kwargs.items() if k not in ("response_format", "text", "output_config")}, Provider.OPENAI
    )
    assert feed_in_chunks(LoopDetector.for_call(plain), array, seed=1) is not None


JSON_FILLERS = {"zeros": "0", "spaces": " ", "letters": "a", "spaced zeros": "0 "}


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("filler", list(JSON_FILLERS))
def test_a_json_string_of_one_repeated_character_is_a_value_under_structured_output_not_a_loop(
    filler: str, chunking: str
) -> None:
    run = JSON_FILLERS[filler] * (3000 // len(JSON_FILLERS[filler]))
    for text in ('{"padding": "' + run + '", "ok": true}', '{"quote": "he said \\"' + run + '\\" twice"}'):
        assert feed_chunks(LoopDetector(structured_output=True), CHUNKINGS[chunking](text, 0)) is None
    # the same run outside a string, or without structured output, decoded piece by piece, is a model stuck
    assert feed_chunks(LoopDetector(structured_output=True), random_chunks('{"a": "b"}' + run, 0)) is not None
    assert feed_chunks(LoopDetector(), random_chunks('{"padding": "' + run, 0)) is not None


def test_a_run_that_arrives_in_one_delta_trips_only_once_the_next_delta_extends_it() -> None:
    """A whole answer in one event (a mock's, a non-streaming server's) is no decoding to stop."""
    unit = "I will keep repeating this sentence. "
    for whole, more in (("x" * 100_000, "x" * 20), (PROSE + unit * 10, unit)):
        detector = LoopDetector()
        assert detector.feed(whole) is None
        assert detector.feed(more) is not None


def test_a_paragraph_repeating_is_cut_within_three_periods() -> None:
    paragraph = PROSE[:240] + "\n"
    tripped = feed_in_chunks(LoopDetector(), PROSE + paragraph * 10, seed=3)
    assert tripped is not None
    fed, loop = tripped
    assert (fed - len(PROSE)) / len(paragraph) < 3.1
    assert len(loop.unit) == len(paragraph)


def test_a_period_longer_than_max_period_chars_is_not_looked_for() -> None:
    paragraph = PROSE[:300] + "\n"
    assert feed_in_chunks(LoopDetector(), paragraph * 10, seed=0) is None


def test_the_detector_stays_tripped_and_reports_the_same_loop() -> None:
    detector = LoopDetector()
    first = feed_in_chunks(detector, "no " * 300, seed=0)
    assert first is not None
    assert detector.tripped == first[1]
    assert detector.feed("something else entirely") == first[1]


def test_a_fresh_detector_has_not_tripped() -> None:
    detector = LoopDetector()
    assert detector.tripped is None
    assert detector.feed("") is None


def test_memory_stays_within_the_window() -> None:
    detector = LoopDetector()
    feed_in_chunks(detector, PROSE * 20, seed=0)
    assert len(detector._text) <= 1024


def test_records_that_stop_repeating_are_followed_no_further_and_prose_after_them_is_cut() -> None:
    records = '{"sku": "WID-0001", "status": "in_stock"},\n' * 30
    loop = "I am sorry, I cannot continue with this request. "
    tripped = feed_chunks(LoopDetector(), token_chunks(records + "]\n" + loop * 10, 0))
    assert tripped is not None
    fed, found, chunk = tripped
    assert fed - len(chunk) < len(records) + 2 + 3 * len(loop)
    assert found.unit.strip() == loop.strip()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_repeats": 1}, "min_repeats"),
        ({"min_span_chars": 0}, "min_span_chars"),
        ({"max_period_chars": 0}, "max_period_chars"),
        ({"window_chars": 100}, "window_chars"),
        ({"max_period_chars": 512}, "window_chars"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LoopDetector(**kwargs)


def test_custom_settings_change_the_rule() -> None:
    detector = LoopDetector(min_repeats=5, min_span_chars=32, max_period_chars=64, window_chars=512)
    tripped = feed_in_chunks(detector, "Preamble text. " + "loop de loop! " * 10, seed=0)
    assert tripped is not None
    assert tripped[1].repeats >= 5


PROSE_CHARS = st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="{}[]|=<>,;\t\\")


@settings(max_examples=150, deadline=None)
@given(
    unit=st.text(alphabet=PROSE_CHARS, min_size=20, max_size=200).filter(
        lambda u: sum(char.isalpha() for char in set(u)) >= 8
    ),
    head=st.text(max_size=300),
    seed=st.integers(0, 1000),
)
def test_any_prose_unit_with_eight_letters_repeating_is_cut_within_three_periods_and_reports_a_real_loop(
    unit: str, head: str, seed: int
) -> None:
    text = head + unit * 8
    tripped = feed_chunks(LoopDetector(), random_chunks(text, seed))
    assert tripped is not None
    fed, loop, chunk = tripped
    assert fed - len(chunk) < len(head) + 3 * len(unit)
    assert loop.repeats >= 3
    assert loop.unit * loop.repeats in text
    assert len(loop.unit) <= len(unit)


@settings(max_examples=150, deadline=None)
@given(words=st.permutations(PROSE.split()), seed=st.integers(0, 1000))
def test_shuffled_prose_words_never_trip_the_detector(words: list[str], seed: int) -> None:
    assert feed_in_chunks(LoopDetector(), " ".join(words), seed) is None


@settings(max_examples=300, deadline=None)
@given(
    head=st.text(max_size=200),
    unit=st.text(min_size=1, max_size=60),
    repeats=st.integers(0, 60),
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=20),
    structured_output=st.booleans(),
)
def test_any_text_in_any_chunks_never_crashes_and_a_reported_loop_is_really_in_the_text(
    head: str, unit: str, repeats: int, sizes: list[int], structured_output: bool
) -> None:
    text = head + unit * repeats
    detector = LoopDetector(structured_output=structured_output)
    fed = 0
    for i in itertools.count():
        if fed >= len(text):
            break
        size = sizes[i % len(sizes)]
        if size == 0:
            assert detector.feed("") is detector.tripped  # an empty delta changes nothing
        chunk = text[fed : fed + max(size, 1)]
        fed += len(chunk)
        loop = detector.feed(chunk)
        assert len(detector._text) <= 1024 + len(chunk)
        if loop is not None:
            assert loop.repeats >= 3
            assert really_repeats(loop, text[:fed])
            assert detector.feed("more") is loop
            break
