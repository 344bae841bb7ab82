"""The loop guard's detector: trips within a few periods on loops, never on realistic text."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.loopguard import Loop, LoopDetector

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

PYTHON_CODE = '''\
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
'''

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


def feed_in_chunks(detector: LoopDetector, text: str, seed: int) -> tuple[int, Loop] | None:
    """Feed `text` in random chunks of 1 to 20 characters; return (characters fed, loop) on a trip."""
    rng = random.Random(seed)
    fed = 0
    while fed < len(text):
        chunk = text[fed : fed + rng.randint(1, 20)]
        fed += len(chunk)
        if (loop := detector.feed(chunk)) is not None:
            return fed, loop
    return None


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("name", REALISTIC)
def test_realistic_text_never_trips_the_detector(name: str, seed: int) -> None:
    assert feed_in_chunks(LoopDetector(), REALISTIC[name], seed) is None


@pytest.mark.parametrize("seed", range(5))
def test_all_realistic_texts_in_one_stream_never_trip_the_detector(seed: int) -> None:
    assert feed_in_chunks(LoopDetector(), "\n".join(REALISTIC.values()), seed) is None


SENTENCES = [
    "I am sorry about it.",  # 20 characters
    "Let me check that again for you. ",
    "The answer is 42, as computed in the previous step above. ",
    "I apologise for the confusion; here is the corrected version of the function below:\n",
]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("sentence", SENTENCES)
def test_loop_guard_trips_within_a_few_periods_when_a_sentence_repeats(sentence: str, seed: int) -> None:
    head = PROSE[:300]
    tripped = feed_in_chunks(LoopDetector(), head + sentence * 50, seed)
    assert tripped is not None
    fed, loop = tripped
    assert (fed - len(head)) / len(sentence) < 6
    assert loop.repeats >= 4
    assert len(loop.unit) == len(sentence)
    assert loop.unit in sentence * 2
    assert loop.chars == len(loop.unit) * loop.repeats


@pytest.mark.parametrize(
    ("loop_text", "unit", "max_chars"),
    [
        ("the " * 200, "the ", 260),
        ("ha " * 200, "ha ", 360),
        ("0, " * 300, "0, ", 700),
        ("[0, 0, 0, 0],\n" * 60, "[0, 0, 0, 0],\n", 700),
        ("=" * 1000, "=", 700),
        ("好的" * 300, "好的", 360),
        ("\n" * 1000, "\n", 700),
    ],
)
def test_periods_with_few_letters_trip_only_after_a_long_span(loop_text: str, unit: str, max_chars: int) -> None:
    head = "Sure, here it is: "
    tripped = feed_in_chunks(LoopDetector(), head + loop_text, seed=1)
    assert tripped is not None
    fed, loop = tripped
    assert loop.unit == unit
    assert loop.chars >= 150
    assert fed - len(head) <= max_chars


def test_a_paragraph_repeating_trips_after_four_repeats() -> None:
    paragraph = PROSE[:240] + "\n"
    tripped = feed_in_chunks(LoopDetector(), PROSE + paragraph * 10, seed=3)
    assert tripped is not None
    fed, loop = tripped
    assert (fed - len(PROSE)) / len(paragraph) < 5
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
    detector = LoopDetector(min_repeats=3, min_span_chars=32, max_period_chars=64, window_chars=256)
    tripped = feed_in_chunks(detector, "Preamble text. " + "loop de loop! " * 10, seed=0)
    assert tripped is not None
    assert tripped[1].repeats >= 3


@settings(max_examples=150, deadline=None)
@given(
    unit=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=20, max_size=200).filter(
        lambda u: sum(char.isalpha() for char in set(u)) >= 8
    ),
    head=st.text(max_size=300),
    seed=st.integers(0, 1000),
)
def test_any_unit_with_eight_letters_repeating_trips_within_five_periods_and_reports_a_real_loop(
    unit: str, head: str, seed: int
) -> None:
    tripped = feed_in_chunks(LoopDetector(), head + unit * 8, seed)
    assert tripped is not None
    fed, loop = tripped
    assert fed - len(head) < 5 * len(unit) + 36
    assert loop.repeats >= 4
    assert loop.unit * loop.repeats in head + unit * 8
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
)
def test_any_text_in_any_chunks_never_crashes_and_a_reported_loop_is_really_in_the_text(
    head: str, unit: str, repeats: int, sizes: list[int]
) -> None:
    text = head + unit * repeats
    detector = LoopDetector()
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
            assert loop.repeats >= 4 and loop.chars == len(loop.unit) * loop.repeats
            rotations = (loop.unit[j:] + loop.unit[:j] for j in range(len(loop.unit)))  # the unit is shown rotated
            assert any(rotation * loop.repeats in text[:fed] for rotation in rotations)
            assert detector.feed("more") is loop
            break
