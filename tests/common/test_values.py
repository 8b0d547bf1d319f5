import json

import pytest
import torch
from hypothesis import given, settings

from common.errors import IRFormatError, IRSerializationError
from common.testing import ir_values
from common.values import Ref, decode, encode, values_equal
from tests.conftest import examples


@settings(max_examples=examples(300))
@given(ir_values())
def test_encode_decode_round_trip_through_json(value):
    text = json.dumps(encode(value), allow_nan=False)
    assert values_equal(decode(json.loads(text)), value)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ((1, 2), {"$tuple": [1, 2]}),
        (torch.float16, {"$dtype": "float16"}),
        (float("-inf"), {"$float": "-inf"}),
        (Ref("x", 1), {"$ref": "x", "index": 1}),
        ({"$a": 1}, {"$dict": [["$a", 1]]}),
        (slice(None, 3), {"$slice": [None, 3, None]}),
        (torch.channels_last, {"$memory_format": "channels_last"}),
        (torch.Size([2, 3]), {"$size": [2, 3]}),
    ],
)
def test_encoding_is_readable(value, encoded):
    assert encode(value) == encoded
    assert values_equal(decode(encoded), value)


def test_decode_never_resolves_arbitrary_names():
    for bad in ({"$dtype": "__class__"}, {"$memory_format": "load"}, {"$layout": "os"}, {"$device": "cpu:x:y"}):
        with pytest.raises(IRFormatError):
            decode(bad)


def test_objects_outside_the_domain_are_refused():
    with pytest.raises(IRSerializationError, match="tensor"):
        encode({"w": torch.ones(2)})
    with pytest.raises(IRSerializationError, match="object"):
        encode(object())


def test_a_size_comes_back_as_a_size_not_a_tuple():
    back = decode(json.loads(json.dumps(encode({"resolution": torch.Size([4, 4])}))))
    assert type(back["resolution"]) is torch.Size and back["resolution"] == (4, 4)


@pytest.mark.parametrize("raw", [[2**63], [-1], [1.0], [True], "3", [[1]]])
def test_a_bad_size_is_a_format_error(raw):
    with pytest.raises(IRFormatError, match=r"\$size takes"):
        decode({"$size": raw})
