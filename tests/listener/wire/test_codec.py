"""The standard codec: items to queue text and back; publishes base64, reads plain or base64."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pydantic import BaseModel
from structlog.testing import capture_logs

from cloudqueue.listener import ConfigurationError, DecodeError, MessageCodec
from cloudqueue.listener.wire.codec import Encoding, reading_codec


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


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@pytest.mark.parametrize(
    "content", ['{"sensor": "ü", "value": 2}', _b64('{"sensor": "ü", "value": 2}')]
)
@pytest.mark.parametrize("item_type", [Reading, dict])
def test_auto_reads_json_items_written_plain_or_base64(item_type: type, content: str) -> None:
    """In auto, a JSON item is read whether its producer wrote it as it stands or in base64."""
    item: Any = MessageCodec(item_type).decode(content)
    assert (item.sensor if isinstance(item, Reading) else item["sensor"]) == "ü"


def test_auto_takes_json_as_it_stands_before_trying_base64() -> None:
    """Content that is a valid item as it stands is never base64-decoded (1234 is also base64)."""
    assert MessageCodec(int).decode("1234") == 1234


def test_auto_still_publishes_base64_as_azure_functions_reads() -> None:
    """auto changes reading only: what is published stays base64."""
    assert MessageCodec(dict).encode({"a": 1}) == _b64('{"a":1}')


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (_b64("héllo wörld"), "héllo wörld"),  # a base64 producer
        ("héllo wörld", "héllo wörld"),  # a plain producer: not base64 at all
        ("test", "test"),  # base64 by chance, but not of printable UTF-8
        ("", ""),
    ],
)
def test_auto_reads_text_items_by_the_documented_rule(content: str, expected: str) -> None:
    """For str items, canonical base64 of printable UTF-8 is decoded, anything else kept."""
    assert MessageCodec(str).decode(content) == expected


def test_auto_reads_bytes_items_from_base64_or_from_plain_text() -> None:
    """For bytes items, canonical base64 is decoded and other text becomes its UTF-8 bytes."""
    codec = MessageCodec(bytes)
    assert codec.decode(base64.b64encode(b"\x00\xff").decode()) == b"\x00\xff"
    assert codec.decode("plain ü") == "plain ü".encode()


@pytest.mark.parametrize(("item_type", "ambiguous"), [(str, True), (bytes, True), (dict, False)])
def test_auto_is_ambiguous_only_for_text_and_bytes(item_type: type, ambiguous: bool) -> None:
    """Only text and bytes items can look like base64 themselves, so only they warn at start."""
    assert MessageCodec(item_type).ambiguous is ambiguous


def test_a_worker_reading_text_in_auto_is_warned_once_at_start() -> None:
    """reading_codec logs one warning that advises an explicit encoding."""
    with capture_logs() as logs:
        reading_codec(str, "auto")
        reading_codec(str, "plain")
        reading_codec(dict, "auto")
    assert [entry["event"] for entry in logs] == ["encoding_ambiguous"]
    assert "listener.encoding" in logs[0]["advice"]


def test_base64_mode_keeps_refusing_plain_text() -> None:
    """The explicit base64 encoding is as strict as before: plain JSON is refused."""
    with pytest.raises(DecodeError, match="not valid base64"):
        MessageCodec(dict, encoding="base64").decode('{"a": 1}')


def test_plain_mode_keeps_refusing_base64_text() -> None:
    """The explicit plain encoding never base64-decodes: base64 of JSON is not JSON."""
    with pytest.raises(DecodeError, match="Invalid JSON"):
        MessageCodec(dict, encoding="plain").decode(_b64('{"a": 1}'))
    assert MessageCodec(str, encoding="plain").decode(_b64("hi")) == _b64("hi")


@pytest.mark.parametrize(
    ("encoding", "advice"),
    [
        ("base64", "set listener.encoding = 'auto'"),
        ("plain", "set listener.encoding = 'auto'"),
        ("auto", "item type does not match"),
    ],
)
def test_an_undecodable_message_says_what_was_tried_how_it_starts_and_what_to_change(
    encoding: Encoding, advice: str
) -> None:
    """The poison reason names the encoding, quotes the first characters and gives advice."""
    content = "hello, this is not what a dict worker expects at all " * 3
    with pytest.raises(DecodeError) as raised:
        MessageCodec(dict, encoding=encoding).decode(content)
    reason = str(raised.value)
    assert f"listener.encoding = '{encoding}'" in reason
    assert "content starts 'hello, this is not what a dict worker ex'..." in reason
    assert advice in reason
    if encoding == "auto":
        assert "as JSON:" in reason
        assert "as base64:" in reason


def test_the_older_base64_flag_still_selects_an_encoding() -> None:
    """MessageCodec(..., base64=False) is the plain encoding, base64=True the base64 one."""
    assert MessageCodec(str, base64=False).encoding == "plain"
    assert MessageCodec(str, base64=True).encoding == "base64"


class Invoice(BaseModel):
    number: int


class Order(BaseModel):
    sku: str


class User(BaseModel):
    name: str


@pytest.mark.parametrize("encoding", ["base64", "auto"])
def test_an_undecodable_base64_message_quotes_the_text_that_was_enqueued(
    encoding: Encoding,
) -> None:
    """The reason shows the decoded text (40 characters, control characters escaped), which is
    what its producer wrote, not the base64 it travelled in."""
    text = '{"a": oops\x1b[31m this is not JSON at all, and it goes on}'
    with pytest.raises(DecodeError) as raised:
        MessageCodec(dict, encoding=encoding).decode(_b64(text))
    reason = str(raised.value)
    assert "decoded content starts '{\"a\": oops\\x1b[31m this is not JSON at all,'..." in reason
    assert _b64(text)[:20] not in reason


@pytest.mark.parametrize(
    ("item_type", "phrase"),
    [(Invoice, "an Invoice"), (Order, "an Order"), (User, "a User"), (dict, "a dict")],
)
def test_an_undecodable_message_names_its_item_type_with_the_right_article(
    item_type: type, phrase: str
) -> None:
    """ "an Invoice", "an Order", "a User": never "a Invoice"."""
    with pytest.raises(DecodeError, match=f"cannot read {phrase} with"):
        MessageCodec(item_type, encoding="plain").decode("not json")


class Email(BaseModel):
    to: str
    subject: str


@pytest.mark.parametrize("published", ["base64", "plain"])
def test_json_that_is_not_the_item_reports_the_missing_field_first(published: str) -> None:
    """Text that is JSON but lacks a field (as `cloudqueue enqueue emails '{"to": ...}'` sends)
    is refused naming that field first, before the reading that found no JSON at all."""
    text = '{"to": "d@x.io"}'
    content = _b64(text) if published == "base64" else text
    with pytest.raises(DecodeError) as raised:
        MessageCodec(Email, encoding="auto").decode(content)
    first_reading = str(raised.value).split("'auto': ", 1)[1].split("; ")[0]
    assert "subject: Field required" in first_reading
