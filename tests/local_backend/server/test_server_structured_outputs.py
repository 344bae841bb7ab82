"""`response_format` through the real `openai` client against the bundled model: every seeded
json_schema answer validates against its schema; json_object gives a JSON object."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from tests.local_backend.serving import ServedEngines

REQUESTS = 50
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 32},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["C", "F"]},
        "rain": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "maxItems": 4},
    },
    "required": ["city", "days", "unit", "rain", "hours"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Give me the weather forecast for Paris."}]


@pytest.fixture(scope="module")
def client(serve: ServedEngines) -> Iterator[openai.OpenAI]:
    served = serve("default", max_model_len=512, kv_cache_memory=2**22)
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0) as client:
        yield client


def test_fifty_seeded_json_schema_answers_are_all_valid_against_the_schema(client):
    answers = set()
    for seed in range(REQUESTS):
        response = client.chat.completions.create(
            model="tiny", messages=MESSAGES, response_format=FORMAT, seed=seed, temperature=1.0, max_tokens=160
        )
        [choice] = response.choices
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)
        answers.add(choice.message.content)
    assert len(answers) > REQUESTS // 2  # sampled, not one answer repeated


def test_a_streamed_json_schema_answer_is_the_whole_one(client):
    kwargs = dict(model="tiny", messages=MESSAGES, response_format=FORMAT, seed=7, max_tokens=160)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(
        c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs) if c.choices
    )
    assert streamed == whole and json.loads(whole)["unit"] in ("C", "F")


def test_json_object_gives_a_json_object_where_plain_text_would_not_be_one(client):
    kwargs = dict(model="tiny", messages=MESSAGES, temperature=0, max_tokens=120)
    plain = client.chat.completions.create(**kwargs).choices[0].message.content
    with pytest.raises(ValueError):
        json.loads(plain)
    answer = client.chat.completions.create(response_format={"type": "json_object"}, **kwargs).choices[0]
    assert answer.finish_reason == "stop" and isinstance(json.loads(answer.message.content), dict)


@pytest.mark.parametrize(
    "response_format", [{"type": "json_schema", "json_schema": {"name": "x", "schema": "no"}}, {"type": "yaml"}]
)
def test_a_bad_response_format_is_refused_naming_it(client, response_format):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=MESSAGES, response_format=response_format)
    assert caught.value.param == "response_format"
