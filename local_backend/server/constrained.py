"""Constrained decoding with llguidance: JSON (`json_object`, `json_schema`), tool calls, grammars.

llguidance, not xgrammar: its wheel has no dependencies (xgrammar's pulls `triton` and
`apache-tvm-ffi` and wants a CUDA-capable torch to be worth it), it builds its token trie from
`tokenizer.json` once per engine, and it compiles a JSON schema lazily, so the first token of a
request is not held up by a large schema. vLLM ships both.

A request's `Constraint` (parsed with it, see `requests`) says what the answer must be: one call
of the forced tools; under `tool_choice: "auto"` text (or the format's JSON) or calls of the
offered tools, never of a tool that was not offered nor with arguments its schema refuses; JSON
valid against a schema; or a caller's grammar (llama.cpp's GBNF `grammar`, read as Lark).
`Grammars.compile` turns it into a `Grammar`. Under `auto` the text is free until the model writes
`<tool_call>` (a lazy lexeme ends there), and from there on the call is held to the offered tools.
A `GrammarProcessor` is the request's logits processor (see `SamplingParams.logits_processor`):
at each step it feeds the matcher the tokens sampled since the last step, then sets every token
the grammar forbids to −inf. Once the grammar is complete only EOS is allowed, so the answer ends
there. JSON is written compactly (`", "` and `": "` separators, no free whitespace): a small
model given free whitespace can fill its whole budget with newlines. For the same reason an object
schema that does not say `additionalProperties` is held to its listed properties (as OpenAI's
strict mode requires): the output is still valid against the schema as given, and cannot wander
into invented keys until the token budget runs out.

A schema or a grammar is bounded by what it costs to compile before llguidance sees it
(`compile_bounds`: depth with `$ref`s followed, size, properties, rules), and it
compiles once per request, on a worker thread (llguidance drops the GIL while it builds), within
`GRAMMAR_COMPILE_SECONDS` and llguidance's own `max_grammar_size`; each choice of the request then
matches on its own copy (`Grammar.processor`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import torch
from llguidance.gbnf_to_lark import any_to_lark

from local_backend.model.tokenizer import TextTokenizer
from local_backend.model.tool_prompt import TOOL_CALL_END, TOOL_CALL_START, Tool
from local_backend.server._constants import GRAMMAR_COMPILE_SECONDS, GRAMMAR_MAX_SIZE
from local_backend.server.compile_bounds import check_grammar, check_schemas
from local_backend.server.errors import ApiError

logger = logging.getLogger(__name__)

JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance's JSON compile options: compact separators, no free whitespace."""
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
_BITS = 32


@dataclass(frozen=True, slots=True)
class Constraint:
    """What a request's answer must be: one call of `tools` (a forced `tool_choice`); with
    `calls_optional` (`auto`) text, or JSON valid against `schema` when there is one, or calls of
    `tools` (only one when not `parallel`); else JSON valid against `schema`; else the Lark grammar
    `lark`. `param` is the field a grammar that does not compile is blamed on."""

    param: str
    tools: tuple[Tool, ...] = ()
    schema: Any = None
    calls_optional: bool = False
    parallel: bool = True
    lark: str | None = None

    @classmethod
    def json(cls, schema: Any, param: str) -> Constraint | None:
        """JSON valid against `schema`, or None (free text) when there is none."""
        return None if schema is None else cls(param, schema=schema)

    @classmethod
    def gbnf(cls, text: str, param: str) -> Constraint:
        """Output that the GBNF grammar `text` (llama.cpp's `grammar`; a Lark grammar reads too) accepts;
        a 400 naming `param` when llguidance cannot read it."""
        check_grammar(text, param)
        try:
            lark = any_to_lark(text)
        except Exception as exc:  # the converter raises bare Exceptions for a missing rule, RecursionError ...
            raise ApiError(f"{param} is not a GBNF grammar llguidance reads: {exc}"[:300], param=param) from None
        return cls(param, lark=lark)


class Grammars:
    """The engine's llguidance tokenizer (built once, on first use) and grammar compilation."""

    def __init__(self, tokenizer: TextTokenizer, vocab_size: int, eos: Sequence[int]):
        self._tokenizer, self._vocab_size, self._eos = tokenizer, vocab_size, sorted(eos)
        self._lltokenizer: llguidance.LLTokenizer | None = None

    async def compile(self, constraint: Constraint | None) -> Grammar | None:
        """The grammar of a request's constraint (None: no constraint, free text)."""
        if constraint is None:
            return None
        if constraint.lark is not None:
            return await self._compile(llguidance.LLMatcher.grammar_from_lark(constraint.lark), constraint.param)
        if constraint.calls_optional:
            return await self.text_or_calls(constraint.tools, constraint.schema, constraint.parallel, constraint.param)
        if constraint.tools:
            return await self.tool_call(constraint.tools, constraint.param)
        return await self.json(constraint.schema, constraint.param)

    async def json(self, schema: Any, param: str) -> Grammar:
        """Output that is one JSON value valid against `schema` (an object schema for `json_object`)."""
        if not isinstance(schema, dict):
            raise ApiError(f"{param} must be a JSON schema object", param=param)
        check_schemas([(schema, param)])
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(closed(schema), overrides=JSON_OPTIONS)
        except ValueError as exc:
            raise ApiError(f"{param} is not a JSON schema llguidance accepts: {exc}"[:300], param=param) from None
        return await self._compile(grammar, param)

    async def tool_call(self, tools: Sequence[Tool], param: str) -> Grammar:
        """Output that is exactly one `<tool_call>` block calling one of `tools` with schema-valid arguments."""
        lark = "start: call\n" + _call_rules(tools, param)
        return await self._compile(llguidance.LLMatcher.grammar_from_lark(lark), param)

    async def text_or_calls(self, tools: Sequence[Tool], schema: Any, parallel: bool, param: str) -> Grammar:
        """Output that is free text (JSON valid against `schema` when given), or calls of `tools` only.

        Free text may lead up to the calls; JSON may not (the answer is one or the other). After the
        calls only more calls (`parallel`) or the end may follow.
        """
        more = ' ("\\n" call)*' if parallel else ""
        if schema is None:
            lark = (
                f"start: TEXT | head call_body{more}\nTEXT: /(.|\\n)*/\n"
                f"head[lazy]: TEXT {json.dumps(TOOL_CALL_START)}\n"
            )
        else:
            check_schemas([(schema, param)])
            answer = json.dumps({**closed(schema), "x-guidance": JSON_OPTIONS})
            lark = f"start: answer | call{more}\nanswer: %json {answer}\n"
        return await self._compile(llguidance.LLMatcher.grammar_from_lark(lark + _call_rules(tools, param)), param)

    async def _compile(self, grammar: str, param: str) -> Grammar:
        """The grammar's matcher, built on a worker thread; a 400 when it fails or takes too long.

        A compile past the deadline runs on to its end on that thread (it cannot be interrupted),
        bounded by the schema bounds and `max_grammar_size`; the request is answered at once.
        """
        limits = llguidance.LLParserLimits(max_grammar_size=GRAMMAR_MAX_SIZE)
        build = asyncio.to_thread(llguidance.LLMatcher, self._llt(), grammar, log_level=0, limits=limits)
        try:
            matcher = await asyncio.wait_for(build, GRAMMAR_COMPILE_SECONDS)
        except TimeoutError:
            raise ApiError(
                f"{param}: the grammar did not compile within {GRAMMAR_COMPILE_SECONDS} s; simplify the schema",
                param=param,
            ) from None
        if matcher.is_error():
            raise ApiError(f"{param}: the grammar does not compile: {matcher.get_error()}"[:300], param=param)
        return Grammar(matcher, self._vocab_size)

    def _llt(self) -> llguidance.LLTokenizer:
        if self._lltokenizer is None:
            self._lltokenizer = llguidance.LLTokenizer(
                self._tokenizer.to_json(), n_vocab=self._vocab_size, eos_token=self._eos
            )
        return self._lltokenizer


def _call_rules(tools: Sequence[Tool], param: str) -> str:
    """Lark rules `call` (one whole `<tool_call>` block) and `call_body` (what follows its tag): a
    call of one of `tools` by name, with arguments valid against that tool's schema."""
    check_schemas((tool.parameters, param) for tool in tools)
    rules = []
    for i, tool in enumerate(tools):
        head = json.dumps(f'{json.dumps(tool.name)}, "arguments": ')
        schema = {**closed(tool.parameters), "x-guidance": JSON_OPTIONS}
        rules.append(f"call{i}: {head} args{i}\nargs{i}: %json {json.dumps(schema)}")
    opening = json.dumps('\n{"name": ')
    closing = json.dumps(f"}}\n{TOOL_CALL_END}")
    choice = " | ".join(f"call{i}" for i in range(len(tools)))
    return f"call: {json.dumps(TOOL_CALL_START)} call_body\ncall_body: {opening} ({choice}) {closing}\n" + "\n".join(
        rules
    )


def closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` wherever an object lists properties and says nothing more."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) if key != "enum" and key != "const" else value for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@dataclass(frozen=True, slots=True)
class Grammar:
    """A request's compiled grammar; each `processor()` matches on a copy of its own (one per choice)."""

    matcher: llguidance.LLMatcher
    vocab_size: int

    def processor(self) -> GrammarProcessor:
        return GrammarProcessor(self.matcher.deep_copy(), self.vocab_size)


class GrammarProcessor:
    """Masks a request's logits to what its grammar allows next (see the module doc)."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int):
        self._matcher = matcher
        self._consumed = 0
        self._shifts = torch.arange(_BITS, dtype=torch.int32)
        self._vocab_size = vocab_size

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        matcher = self._matcher
        for token in output_token_ids[self._consumed :]:
            matcher.consume_token(token)
        self._consumed = len(output_token_ids)
        if matcher.is_error():  # never expected (the mask allowed the token); leave the row as it is
            logger.warning("grammar matcher failed: %s", matcher.get_error())
            return logits
        words = torch.frombuffer(bytearray(matcher.compute_bitmask()), dtype=torch.int32)
        allowed = ((words[:, None] >> self._shifts) & 1).flatten()[: logits.shape[-1]].bool()
        if allowed.shape[0] < logits.shape[-1]:
            allowed = torch.cat((allowed, allowed.new_zeros(logits.shape[-1] - allowed.shape[0])))
        return logits.masked_fill_(~allowed.to(logits.device), float("-inf"))
