"""Incremental text and stop strings: a stop string is cut, never streamed in part."""

from __future__ import annotations

import random

from local_backend.engine.detokenizer import Detokenizer


class CharTokenizer:
    """One character per token id (id = code point); enough to drive the detokenizer."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def _feed(text: str, stop: tuple[str, ...]) -> tuple[list[str], Detokenizer]:
    detok = Detokenizer(CharTokenizer(), [ord(">")], stop)
    deltas = []
    for ch in text:
        stopped = detok.add(ord(ch))
        deltas.append(detok.take_delta(final=stopped))
        if stopped:
            break
    return deltas, detok


def test_text_accumulates_token_by_token_without_stops():
    deltas, detok = _feed("hello", ())
    assert deltas == ["h", "e", "l", "l", "o"] and detok.text == "hello"


def test_a_stop_string_ends_the_text_before_it():
    deltas, detok = _feed("say END now", ("END",))
    assert detok.stop_string == "END" and detok.text == "say "
    assert "".join(deltas) == "say "


def test_a_possible_stop_prefix_is_held_back_then_released_when_it_diverges():
    deltas, detok = _feed("aENx", ("END",))
    assert deltas == ["a", "", "", "ENx"]
    assert detok.stop_string is None


def test_the_earliest_of_several_stop_strings_wins():
    _, detok = _feed("abcXYZ", ("XYZ", "cX"))
    assert detok.text == "ab" and detok.stop_string == "cX"


def test_final_take_releases_held_back_text_when_generation_ends_otherwise():
    detok = Detokenizer(CharTokenizer(), [], ("END",))
    detok.add(ord("E"))
    assert detok.take_delta(final=False) == ""
    assert detok.take_delta(final=True) == "E"


def test_incomplete_characters_wait_for_the_next_token():
    class Bytes(CharTokenizer):
        def decode(self, ids):
            return bytes(ids).decode("utf-8", errors="replace")

    detok = Detokenizer(Bytes(), [], ())
    first, second = "é".encode()
    detok.add(first)
    assert detok.take_delta(final=False) == ""
    detok.add(second)
    assert detok.take_delta(final=False) == "é"


def _byte_level_tokenizer(pieces: list[bytes]):
    """A real byte-level BPE tokenizer whose tokens are exactly `pieces` (ids in that order)."""
    from tokenizers import Tokenizer, decoders, models

    from local_backend.model.tokenizer import TextTokenizer

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    char = {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}  # GPT-2's byte map
    vocab = {"".join(char[b] for b in piece): i for i, piece in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    return TextTokenizer(tok, {}, None)


def test_final_text_keeps_complete_characters_held_back_behind_an_incomplete_one():
    from local_backend.engine.request import Request
    from local_backend.engine.sequence import Sequence
    from local_backend.sampling.sampling_params import SamplingParams

    nichi, hon, go = "日".encode(), "本".encode(), "語".encode()
    # each token after "ok " ends inside a character: 日 and 本 complete only in a later token
    pieces = [b"o", b"k", b" ", nichi[:2], nichi[2:] + hon[:1], hon[1:] + go[:1]]
    tokenizer = _byte_level_tokenizer(pieces)
    output = list(range(len(pieces)))
    assert tokenizer.decode(output) == "ok 日本\ufffd"
    params = SamplingParams(max_tokens=len(output))
    finals = []
    request = Request(Sequence("r", [0], params), Detokenizer(tokenizer, [0], ()), finals.append)
    for token in output:  # as the engine core delivers them: a delta per token, the last one ends it
        request.seq.append_token(token)
        assert not request.detokenizer.add(token)
        if token != output[-1]:
            request.emit(token)
    assert not request.detokenizer.flush()
    request.complete("length", (output[-1],))
    streamed = "".join(d.text for d in finals)
    assert finals[-1].completion.text == streamed == "ok 日本"  # cut mid-character: the last one drops


def _naive(text: str, stops: tuple[str, ...]) -> tuple[str, str | None, int]:
    """The text cut at the earliest stop string, which one, and how much of its tail could begin one."""
    found = [(text.find(s), s) for s in stops if s in text]
    if found:
        at, stop = min(found)
        return text[:at], stop, 0
    held = max((n for s in stops for n in range(1, min(len(s) - 1, len(text)) + 1) if text.endswith(s[:n])), default=0)
    return text, None, held


def test_stop_strings_match_as_a_plain_search_would_on_random_text():
    rng = random.Random(54)
    for _ in range(2000):
        stops = tuple({"".join(rng.choice("ab") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 3))})
        text = "".join(rng.choice("ab") for _ in range(rng.randint(0, 16)))
        deltas, detok = _feed(text, stops)
        fed = text[: len(deltas)]
        expected_text, expected_stop, held = _naive(fed, stops)
        assert (detok.text, detok.stop_string) == (expected_text, expected_stop), (stops, text)
        assert "".join(deltas) == expected_text[: len(expected_text) - held], (stops, text)


def test_a_token_costs_the_same_whatever_the_stop_strings_length():
    """16 stop strings of 50,000 characters once cost the engine thread 185 ms a token (each token
    walked every stop string's starts); the matcher's table now grows only as far as the text matched."""
    stops = tuple(f"{i}" + "ab" * 25_000 for i in range(16))
    deltas, detok = _feed("ab" * 300 + "1ab", stops)
    assert detok.stop_string is None and "".join(deltas) == ("ab" * 300 + "1ab")[:-3]  # "1ab" may begin one
    walked = [len(match._border) for match in detok._stops]
    assert max(walked) <= 3  # not 50,001: the table stops where the match stopped
