"""The simulator's pure parts: tokenizer, rendering, decode, cache arithmetic, fault queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.simulator.cache import BreakpointCache, PrefixCache
from tests.simulator.decode import DecodeParams, Finish, decode
from tests.simulator.errors import SimulatedError
from tests.simulator.faults import CutFault, CutMode, ErrorFault, FaultQueue, ResetFault
from tests.simulator.openai_chat import ChatCompletionsApi
from tests.simulator.tokens import RenderedBlock, RenderedPrompt, tokenize


@given(st.text())
def test_tokenizer_is_lossless(text: str) -> None:
    assert "".join(tokenize(text)) == text


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, world!", ["Hello", ",", " world", "!"]),
        ("  two  spaces ", ["  two", "  spaces", " "]),
        ("", []),
        ("a\nb", ["a", "\nb"]),
    ],
)
def test_tokenizer_splits_words_and_punctuation_with_leading_space(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


@pytest.mark.parametrize(
    ("params", "text", "finish", "stop"),
    [
        (DecodeParams(None), "one two three four", Finish.END, None),
        (DecodeParams(2), "one two", Finish.LENGTH, None),
        (DecodeParams(None, ("three",)), "one two ", Finish.STOP, "three"),
        (DecodeParams(None, ("ree f", "two")), "one ", Finish.STOP, "two"),
        (DecodeParams(2, ("three",)), "one two", Finish.LENGTH, None),  # the stop lies beyond the cap
    ],
)
def test_decode_ends_at_the_first_of_stop_cap_and_end(
    params: DecodeParams, text: str, finish: Finish, stop: str | None
) -> None:
    decoded = decode("one two three four", None, params, default_cap=100)
    assert (decoded.text, decoded.finish, decoded.stop_sequence) == (text, finish, stop)


def test_loop_mode_repeats_the_unit_until_the_cap() -> None:
    decoded = decode("ignored", "la la. ", DecodeParams(None), default_cap=30)
    assert (len(decoded.tokens), decoded.finish) == (30, Finish.LENGTH)
    assert decoded.text.startswith("la la. la la.")


def _prompt(n_tokens: int, tail: str = "") -> RenderedPrompt:
    return RenderedPrompt.from_blocks([RenderedBlock(" w" * n_tokens), RenderedBlock(tail)])


@pytest.mark.parametrize(
    ("common", "expected"),
    [(1023, 0), (1024, 1024), (1100, 1024), (1300, 1280), (2000, 1920)],
)
def test_openai_cache_reads_the_common_prefix_in_128_steps_from_1024(common: int, expected: int) -> None:
    cache = PrefixCache()
    cache.commit(cache.lookup("m", _prompt(common, " first tail " * 40)))
    use = cache.lookup("m", _prompt(common, " second tail " * 40))
    assert use.read == expected
    assert use.written == len(_prompt(common, " second tail " * 40)) // 128 * 128 - expected
    assert cache.lookup("other-model", _prompt(common, " first tail " * 40)).read == 0


def test_cache_markers_do_not_change_the_rendered_prompt() -> None:
    api = ChatCompletionsApi()
    plain = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}]}
    marked = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi there", "prompt_cache_breakpoint": {}}]}
        ],
    }
    assert api.parse(plain).prompt.tokens == api.parse(marked).prompt.tokens


def _blocks(n_blocks: int, marked: set[int], tokens_per_block: int = 100) -> RenderedPrompt:
    return RenderedPrompt.from_blocks(
        [RenderedBlock(f" block{i}" * tokens_per_block, "5m" if i in marked else None) for i in range(n_blocks)]
    )


def test_anthropic_cache_looks_back_at_most_20_blocks_before_a_breakpoint() -> None:
    cache = BreakpointCache()
    cache.commit(cache.lookup("m", _blocks(12, {11}), min_tokens=1024))  # writes blocks 0..11
    near = cache.lookup("m", _blocks(40, {31}), min_tokens=1024)  # breakpoint 20 blocks later
    far = cache.lookup("m", _blocks(40, {32}), min_tokens=1024)  # 21 blocks later

    assert (near.read, near.written, near.uncached_tail) == (1200, 2000, 800)
    assert (far.read, far.written, far.uncached_tail) == (0, 3300, 700)


def test_anthropic_cache_writes_nothing_below_the_minimum_and_splits_ttls() -> None:
    cache = BreakpointCache()
    short = cache.lookup("m", _blocks(5, {2}), min_tokens=1024)
    prompt = RenderedPrompt.from_blocks(
        [RenderedBlock(" a" * 1100, "1h"), RenderedBlock(" b" * 200, "5m"), RenderedBlock(" c" * 10)]
    )
    split = cache.lookup("m", prompt, min_tokens=1024)

    assert (short.read, short.written, short.uncached_tail) == (0, 0, 500)
    assert (split.written, split.written_1h, split.uncached_tail) == (1300, 1100, 10)


def test_fault_queue_serves_each_entry_its_number_of_times_in_order() -> None:
    queue = FaultQueue()
    error, cut = ErrorFault(SimulatedError(429)), CutFault(3, CutMode.END)
    queue.add(error, times=2)
    queue.add(ResetFault(), times=1)
    queue.add(cut, times=1)
    assert [queue.take() for _ in range(5)] == [error, error, ResetFault(), cut, None]
    with pytest.raises(ValueError, match="times"):
        queue.add(error, times=0)
