"""The standard codec: items to queue text and back, base64 by default (as Azure Functions)."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import BaseModel

from listener import ConfigurationError, DecodeError, MessageCodec


class Reading(BaseModel):
    sensor: str
    value: float


def test_models_travel_as_base64_json_that_azure_functions_can_read() -> None:
    """A pydantic item is JSON inside base64, readable by any Functions/WebJobs consumer."""
    content = MessageCodec(Reading).encode(Reading(sensor="t1", value=21.5))
    assert json.loads(base64.b64decode(content)) == {"sensor": "t1", "value": 21.5}


@pytest.mark.parametrize(
    ("item_type", "item"),
    [
        (Reading, Reading(sensor="ü", value=1.0)),
        (str, "héllo"),
        (bytes, b"\x00\xff"),
        (dict, {"a": [1, 2]}),
    ],
)
@pytest.mark.parametrize("base64_wrapped", [True, False])
def test_every_item_type_round_trips(item_type: type, item: object, base64_wrapped: bool) -> None:
    """Models, text, bytes and dicts decode to what was encoded, in both encodings."""
    if item_type is bytes and not base64_wrapped:
        return  # refused up front: see the next test
    codec: MessageCodec[object] = MessageCodec(item_type, base64=base64_wrapped)
    assert codec.decode(codec.encode(item)) == item


def test_text_travels_unchanged_in_plain_mode() -> None:
    """Plain mode stores a str item as the message text itself."""
    assert MessageCodec(str, base64=False).encode("hello") == "hello"


def test_bytes_without_base64_is_a_configuration_error() -> None:
    """Plain text cannot carry arbitrary bytes, so that combination is refused up front."""
    with pytest.raises(ConfigurationError):
        MessageCodec(bytes, base64=False)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("%%%", "base64"),
        (base64.b64encode(b"\xff\xfe").decode(), "UTF-8"),
        (base64.b64encode(b"{").decode(), "JSON"),
        (base64.b64encode(b'{"sensor": "t"}').decode(), "value: Field required"),
    ],
)
def test_content_that_is_not_an_item_raises_decode_error_naming_the_problem(
    content: str, reason: str
) -> None:
    """Bad base64, bad UTF-8, bad JSON and schema violations each say what is wrong."""
    with pytest.raises(DecodeError, match=reason):
        MessageCodec(Reading).decode(content)
