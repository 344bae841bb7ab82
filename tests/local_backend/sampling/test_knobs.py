import dataclasses

from local_backend.engine.engine_config import GENERATION_DEFAULT_KEYS
from local_backend.sampling.knobs import SAMPLING_KNOBS
from local_backend.sampling.sampling_params import SamplingParams
from local_backend.server.fields import SAMPLING_KNOBS as REQUEST_KNOBS


def test_every_knob_is_a_sampling_params_field_of_its_kind():
    fields = {field.name: field for field in dataclasses.fields(SamplingParams)}
    for knob in SAMPLING_KNOBS:
        assert knob.name in fields
        assert knob.kind.__name__ in str(fields[knob.name].type)


def test_the_server_and_the_engine_derive_their_knobs_from_the_one_list():
    assert list(REQUEST_KNOBS) == [knob.name for knob in SAMPLING_KNOBS]
    assert GENERATION_DEFAULT_KEYS == {
        "temperature": "temperature",
        "top_p": "top_p",
        "top_k": "top_k",
        "min_p": "min_p",
        "repetition_penalty": "repetition_penalty",
        "max_new_tokens": "max_tokens",
    }
