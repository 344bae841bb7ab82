"""The loop guard's corpus: answers that repeat on purpose, and runaway loops.

`LEGITIMATE` holds realistic answers whose text repeats back-to-back (identical records, table
rows, log lines, unrolled code, list items): the guard must never cut them. Each entry says whether
the call asked for structured output (`response_format` / `text.format` / `output_config`).

`RUNAWAY_PROSE` holds loops a model really falls into: a head of ordinary answer, then one sentence
or paragraph (20 to 256 characters, 8 or more distinct letters) said again and again. The guard must
cut each one within 3 periods of the loop starting: on the chunk that completes the third copy, or
earlier. `RUNAWAY_SHORT` holds loops of units with few letters (whitespace, separators, "ha "),
which are only cut after a long span, so that "no no no" or a row of "=" passes; and
`RUNAWAY_SPECIAL_TOKENS` special tokens a local model leaks again and again, which look like
markup but are no records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Answer:
    """A legitimate answer; `structured_output`: the call asked for JSON output."""

    text: str
    structured_output: bool = False


@dataclass(frozen=True, slots=True)
class Runaway:
    """A head of answer, then `unit` repeated `repeats` times (until the guard cuts it)."""

    head: str
    unit: str
    repeats: int = 40
    structured_output: bool = False

    @property
    def text(self) -> str:
        return self.head + self.unit * self.repeats


RECORD = {"sku": "WID-0001", "name": "Standard widget", "status": "in_stock", "price": 9.99, "warehouse": "Lisbon"}

TWELVE_RECORDS_PRETTY = json.dumps({"records": [RECORD] * 12}, indent=2)
TWELVE_RECORDS_COMPACT = json.dumps({"records": [RECORD] * 12})
TWELVE_RECORDS_JSON_OBJECT = TWELVE_RECORDS_PRETTY  # the defect: cut with finish_reason "length"


def _lines(line: str, count: int, head: str = "", tail: str = "") -> str:
    return head + (line + "\n") * count + tail


LEGITIMATE: dict[str, Answer] = {
    # Records and JSON
    "12 identical json records under json_object": Answer(TWELVE_RECORDS_JSON_OBJECT, structured_output=True),
    "12 identical compact json records under json_object": Answer(TWELVE_RECORDS_COMPACT, structured_output=True),
    "12 identical json records in a code block": Answer(
        "Here is the inventory export you asked for:\n\n```json\n" + json.dumps([RECORD] * 12, indent=2) + "\n```\n"
    ),
    "jsonl heartbeats": Answer(
        _lines('{"event": "heartbeat", "service": "billing-api", "status": "ok", "latency_ms": 12}', 20)
    ),
    "json schema array of identical strings": Answer(
        json.dumps({"labels": ["needs_review"] * 40, "confidence": 0.42}), structured_output=True
    ),
    "json object with a long array of zeros": Answer(
        json.dumps({"embedding": [0.0] * 256, "model": "text-embed-small", "dimensions": 256}), structured_output=True
    ),
    "json array of nulls under json_schema": Answer(
        json.dumps({"scores": [None] * 64, "reason": "no ratings were submitted this week"}), structured_output=True
    ),
    "jsonl records numbered by id": Answer(
        "".join(json.dumps({"id": i, **RECORD}) + "\n" for i in range(1, 41)), structured_output=True
    ),
    "log lines a second apart": Answer(
        "".join(f"2024-05-01 12:00:{s:02d} INFO health check passed for billing-api in 12 ms\n" for s in range(40))
    ),
    "yaml list of identical items": Answer(
        "replicas:\n" + "  - name: worker\n    image: registry.example.com/worker:2.4.1\n    cpu: 500m\n" * 8
    ),
    "xml elements": Answer(_lines('  <item status="pending" owner="unassigned"/>', 15, "<queue>\n", "</queue>\n")),
    "csv rows without spaces": Answer(
        _lines("N/A,N/A,unknown,0,not started", 25, "region,country,segment,orders,status\n")
    ),
    "csv rows starting with a date": Answer(
        _lines("2024-01-01, pending, Lisbon office, 0.00 EUR", 20, "date, status, site, amount\n")
    ),
    # Tables
    "markdown table of identical rows": Answer(
        _lines(
            "| pending | not started | unassigned | waiting for the customer |",
            10,
            "| status | phase | owner | note |\n|---|---|---|---|\n",
        )
    ),
    "markdown table of check marks": Answer(
        _lines("| ✓ | ✓ | ✓ | ✓ |", 12, "| lint | types | unit | e2e |\n|---|---|---|---|\n")
    ),
    "opening hours table": Answer(
        _lines(
            "| Closed for the holidays | Closed for the holidays | Closed for the holidays |",
            6,
            "| Monday | Tuesday | Wednesday |\n|---|---|---|\n",
        )
    ),
    "ascii table": Answer(
        "+----------+-----------+---------+\n| region   | status    | orders  |\n+----------+-----------+---------+\n"
        + "| Europe   | suspended | none    |\n" * 9
        + "+----------+-----------+---------+\n"
    ),
    "html table cells": Answer(
        _lines("  <tr><td>Pending review</td><td>Unassigned</td></tr>", 10, "<table>\n", "</table>\n")
    ),
    # Logs
    "log lines with timestamps": Answer(
        "The pool ran dry at noon; the log shows:\n\n"
        + _lines("2024-05-01 12:00:00 WARN pool exhausted, retrying connection to db-primary in 5 seconds", 15)
    ),
    "bracketed error lines": Answer(
        _lines("[ERROR] connection refused while contacting payments upstream", 12, "```\n", "```\n")
    ),
    "level-prefixed warnings": Answer(_lines("WARNING: disk usage above ninety percent on the database volume", 10)),
    "logfmt lines": Answer(_lines('level=warn msg="retrying request" component=scheduler attempt=3', 10)),
    "recursion traceback": Answer(
        "Traceback (most recent call last):\n"
        + '  File "walker.py", line 12, in visit\n    return visit(node.parent, depth + 1)\n' * 20
        + "RecursionError: maximum recursion depth exceeded\n"
    ),
    "test runner output": Answer(_lines("tests/test_health.py::test_ping PASSED", 20)),
    # Code
    "keras layers": Answer(
        "model = Sequential()\n"
        + "model.add(Dense(64, activation='relu'))\n" * 5
        + "model.add(Dense(10, activation='softmax'))\n"
    ),
    "c printf loop unrolled": Answer(
        "int main(void) {\n" + '    printf("Hello, world!\\n");\n' * 6 + "    return 0;\n}\n"
    ),
    "sql inserts": Answer(
        _lines("INSERT INTO events (kind, status, source) VALUES ('heartbeat', 'ok', 'billing');", 12)
    ),
    "assembly padding": Answer(_lines("    nop", 40, "pad:\n", "    ret\n")),
    "go error checks": Answer(
        "func run() error {\n" + "\tif err := step(); err != nil {\n\t\treturn err\n\t}\n" * 5 + "\treturn nil\n}\n"
    ),
    "repeated assertions": Answer(
        "def test_health(client):\n" + "    assert client.get('/health').status_code == 200\n" * 5
    ),
    "css rules": Answer(_lines(".card .title { font-weight: 600; color: #333; margin: 0 0 8px; }", 8)),
    "shell retries": Answer(_lines("curl --retry 3 --fail https://status.example.com/healthz", 6, "```sh\n", "```\n")),
    # Lists
    "checklist of identical items": Answer(
        _lines("- [ ] Review the pull request description", 8, "Release checklist:\n")
    ),
    "bullets of not applicable": Answer(_lines("- Not applicable to this region", 8, "Exemptions by country:\n")),
    "bullets of pending review": Answer(_lines("* Pending review by the compliance team", 7)),
    "numbered list with the same text": Answer(
        "".join(f"{i}. Submit the expense report through the finance portal\n" for i in range(1, 13))
    ),
    "key value lines": Answer(_lines("status: waiting for approval from the finance team", 8)),
    "song with a refrain": Answer(
        "Row, row, row your boat,\ngently down the stream.\n" + "Merrily, " * 4 + "\nlife is but a dream.\n"
    ),
}


PROSE_HEAD = (
    "Prefill is one forward pass over the whole prompt, and it sets the time to the first token. "
    "Decode then produces one token at a time, reading every weight and the whole KV cache each step. "
)
LONGEST_PARAGRAPH = (
    "When the cache hits, the server skips the prefill of the cached part entirely, and the first token "
    "arrives sooner. When it misses, the server pays again for work it has already done, often many "
    "times a minute, and the bill grows with every uncached prompt token it reads again."
)[:255] + "\n"
JSON_HEAD = '{"answer": "Prefill is the pass over the prompt; decode makes one token at a time. '

RUNAWAY_PROSE: dict[str, Runaway] = {
    "short apology": Runaway(PROSE_HEAD, "I am sorry about it."),
    "let me check": Runaway(PROSE_HEAD, "Let me check that again for you. "),
    "the answer is": Runaway(PROSE_HEAD, "The answer is 42, as computed in the previous step above. "),
    "corrected version": Runaway(
        PROSE_HEAD, "I apologise for the confusion; here is the corrected version of the function below:\n"
    ),
    "line loop": Runaway(PROSE_HEAD + "\n", "I will keep repeating this sentence.\n"),
    "line loop without a period": Runaway(PROSE_HEAD + "\n", "Here is the final answer to your question\n"),
    "blank-line separated loop": Runaway(PROSE_HEAD + "\n\n", "Let me know if you have any other questions.\n\n"),
    "bullet loop": Runaway("Things to try:\n- Restart the server.\n", "- Clear the cache and restart the server.\n"),
    "numbered-looking prose": Runaway(PROSE_HEAD, "Step one is to wrap the client, and step one is "),
    "markdown emphasis loop": Runaway(PROSE_HEAD, "**Note:** the cache only hits on an identical prefix. "),
    "paragraph loop": Runaway(
        PROSE_HEAD,
        "Prefill and decode stress a GPU in different ways. Prefill processes the whole prompt at once, so "
        "it is bound by compute; decode is bound by memory bandwidth, so batching helps it most.\n",
    ),
    "longest paragraph": Runaway(PROSE_HEAD, LONGEST_PARAGRAPH),
    "french loop": Runaway("Voici la réponse. ", "Je suis désolé, je vais réessayer tout de suite. "),
    "german loop": Runaway("Hier ist die Antwort. ", "Entschuldigung, ich versuche es gleich noch einmal. "),
    "russian loop": Runaway("Вот ответ. ", "Извините, я попробую ещё раз прямо сейчас. "),
    "japanese loop": Runaway("答えは次のとおりです。", "申し訳ありませんが、もう一度説明させてください。確認します。"),
    "loop inside a json string": Runaway(
        JSON_HEAD, "I am not sure about this part of the answer. ", structured_output=True
    ),
    "json string loop with commas": Runaway(
        JSON_HEAD, "Well, as I said, the prefix must be identical. ", structured_output=True
    ),
    "reasoning loop": Runaway("Let me think. ", "Wait, that is not right. Let me recompute the total. "),
    "loop right at the start": Runaway("", "Sure! Here is what you asked for, once more. "),
}

RUNAWAY_SHORT: dict[str, Runaway] = {
    "the": Runaway("Sure, here it is: ", "the ", repeats=200),
    "ha": Runaway("Sure, here it is: ", "ha ", repeats=200),
    "zeros inline": Runaway("Sure, here it is: ", "0, ", repeats=300),
    "equals signs": Runaway("Sure, here it is: ", "=", repeats=1000),
    "chinese ok": Runaway("Sure, here it is: ", "好的", repeats=300),
    "newlines": Runaway("Sure, here it is: ", "\n", repeats=1000),
    "whitespace under json mode": Runaway('{"answer": "42",', "\n ", repeats=600, structured_output=True),
    "closing braces under json mode": Runaway('{"a": {"b": [', "}", repeats=1000, structured_output=True),
}

RUNAWAY_SPECIAL_TOKENS: dict[str, Runaway] = {
    "chatml end": Runaway("The answer is 42.", "<|im_end|>", repeats=200),
    "end of sequence": Runaway("The answer is 42.", "</s>\n", repeats=200),
    "padding": Runaway("The answer is 42.", "[PAD] ", repeats=200),
}

STRUCTURED_RUNAWAY: dict[str, Runaway] = {
    "a json record forever": Runaway(
        '{"records": [\n', json.dumps(RECORD) + ",\n", repeats=400, structured_output=True
    ),
    "a table row forever": Runaway("| a | b |\n|---|---|\n", "| pending | not started |\n", repeats=400),
}
