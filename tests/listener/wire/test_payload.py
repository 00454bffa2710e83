"""The envelope wire format, batch packing and the local payload stores: pure, no queue involved."""

from __future__ import annotations

import base64
import gzip
import json
import math
import random
from pathlib import Path

import pytest

from cloudqueue.listener import (
    ConfigurationError,
    DecodeError,
    FolderPayloadStore,
    InMemoryPayloadStore,
    MessageCodec,
    PayloadNotFoundError,
    PayloadStore,
    open_payload_store,
)
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.stores.payload_store import new_payload_name
from cloudqueue.listener.wire import frames as wire
from cloudqueue.listener.wire.envelope import (
    ENVELOPE_KEY,
    blob_envelope,
    inline_envelope,
    is_reserved,
    parse_envelope,
    without_attempts,
)
from cloudqueue.listener.wire.frames import Packed, pack, unpack
from cloudqueue.listener.wire.packing import (
    MAX_ENVELOPE_BYTES,
    message_bytes,
    plan_batches,
    single_message,
)
from cloudqueue.listener.wire.payload import open_message
from tests.support.azurite import ACCOUNT_KEY

NAME = "orders/" + "0123456789abcdef" * 2


def orders(count: int, seed: int = 7) -> list[str]:
    """Base64 JSON texts of realistic, varied order items, as MessageCodec(dict) writes them."""
    rng = random.Random(seed)
    codec = MessageCodec(dict)
    return [
        codec.encode(
            {
                "order_id": n,
                "customer": f"customer-{rng.randint(1, 300)}",
                "lines": [
                    {"sku": f"SKU-{rng.randint(1, 900)}", "qty": rng.randint(1, 9)}
                    for _ in range(rng.randint(1, 4))
                ],
            }
        )
        for n in range(count)
    ]


def envelope_fields(content: str) -> dict[str, object]:
    fields = json.loads(content)[ENVELOPE_KEY]
    assert isinstance(fields, dict)
    return fields


# -- envelopes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "texts",
    [
        ["eyJhIjogMX0="],
        orders(50),
        ["plain text", "", "ünïcödé ✓", '{"json": true}'],
        ["", ""],
    ],
)
def test_packed_items_unpack_to_the_very_same_texts(texts: list[str]) -> None:
    """pack then unpack gives back each codec text exactly, in order."""
    assert unpack(pack(texts)) == texts


def test_base64_texts_are_stored_decoded_and_other_texts_as_utf8() -> None:
    """All-canonical-base64 texts are compressed as the bytes they encode; anything else as text."""
    assert pack(orders(3)).inner == "base64"
    assert pack(["eyJhIjogMX0=", "not base64!"]).inner == "text"
    non_canonical = "QR=="  # decodes to b"A", which encodes back as "QQ=="
    assert pack([non_canonical]).inner == "text"
    assert unpack(pack([non_canonical])) == [non_canonical]


def test_storing_base64_items_decoded_compresses_better_than_the_base64_text() -> None:
    """Decoding base64 before gzip is worth it: the packed data is clearly smaller."""
    texts = orders(500)
    frames = b"".join(len(t).to_bytes(4, "big") + t.encode() for t in texts)
    as_text = gzip.compress(frames, compresslevel=wire.GZIP_LEVEL, mtime=0)
    assert len(pack(texts).data) < 0.9 * len(as_text)


def test_an_inline_envelope_is_plain_json_naming_its_kind_and_count() -> None:
    """One item makes a gzip envelope, several a batch; both are JSON, never base64."""
    single = inline_envelope(pack(orders(1)))
    batch = inline_envelope(pack(orders(5)))
    assert single.startswith('{"$cloudqueue":{"v":1,"kind":"gzip"')
    assert envelope_fields(batch)["kind"] == "batch"
    assert envelope_fields(batch)["count"] == 5
    assert open_message(batch, None).texts == orders(5)
    assert open_message(batch, None).payload_name is None


def test_a_plain_item_is_its_own_content() -> None:
    """A base64 item or a JSON item that is not an envelope opens as itself."""
    for content in ["eyJhIjogMX0=", '{"order_id": 1}', '{"$cloudqueue": 1, "other": 2}', "{x"]:
        assert parse_envelope(content) is None
        assert open_message(content, None).texts == [content]


def test_a_base64_item_can_never_be_taken_for_an_envelope() -> None:
    """Envelope characters ({, ", :) are outside the base64 alphabet."""
    encoded = MessageCodec(dict).encode({ENVELOPE_KEY: {"v": 1, "kind": "gzip"}})
    assert not is_reserved(encoded)
    assert parse_envelope(encoded) is None


def test_a_blob_envelope_refers_to_the_payload_and_opens_through_the_store() -> None:
    """The reference holds name and size; opening fetches, unpacks and names the payload."""
    packed = pack(orders(1))
    store = InMemoryPayloadStore()
    store.put(NAME, packed.data)
    content = blob_envelope(NAME, packed)
    assert envelope_fields(content)["blob"] == NAME
    assert envelope_fields(content)["bytes"] == len(packed.data)
    assert len(content) < 200
    opened = open_message(content, store)
    assert opened.texts == orders(1)
    assert opened.payload_name == NAME


def test_a_blob_envelope_without_a_store_is_undecodable_and_a_missing_payload_is_not_found() -> (
    None
):
    """No store: DecodeError naming the cure; a store without the payload: PayloadNotFoundError."""
    content = blob_envelope(NAME, pack(["x"]))
    with pytest.raises(DecodeError, match="payload_store"):
        open_message(content, None)
    with pytest.raises(PayloadNotFoundError):
        open_message(content, InMemoryPayloadStore())


def _with(fields: dict[str, object]) -> str:
    base = envelope_fields(inline_envelope(pack(["a", "b"])))
    return json.dumps({ENVELOPE_KEY: {**base, **fields}})


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (_with({"v": 2}), "version 2"),
        (_with({"kind": "zip"}), "unknown kind"),
        (_with({"count": 3}), "announces 3"),
        (_with({"count": 0}), "positive"),
        (_with({"data": "not base64!"}), "malformed"),
        (_with({"data": base64.b64encode(b"not gzip").decode()}), "not valid gzip"),
        (_with({"data": base64.b64encode(gzip.compress(b"x" * 99)[:-9]).decode()}), "truncated"),
        (_with({"data": base64.b64encode(gzip.compress(b"\0\0\0\x09ab")).decode()}), "truncated"),
        (json.dumps({ENVELOPE_KEY: "gzip"}), "not an object"),
        (_with({"kind": "blob", "blob": "../../etc/passwd"}), "invalid payload name"),
        (_with({"attempts": -1}), "attempts"),
    ],
)
def test_a_malformed_envelope_is_a_decode_error(content: str, problem: str) -> None:
    """A message that claims to be an envelope but is broken never passes for an item."""
    with pytest.raises(DecodeError, match=problem):
        open_message(content, InMemoryPayloadStore())


def test_a_payload_that_inflates_past_the_limit_is_refused() -> None:
    """A gzip bomb is a DecodeError, not an exhausted worker (the limit is lowered to test it)."""
    with pytest.raises(DecodeError, match="inflates further"):
        unpack(pack(["z" * 5000]), max_bytes=1000)


# -- what goes into which message ------------------------------------------------------------


def test_a_small_item_travels_exactly_as_the_codec_wrote_it() -> None:
    """Azure Functions interop is unchanged: a fitting item is its own message."""
    text = MessageCodec(dict).encode({"order_id": 1})
    assert single_message(text) == text
    assert single_message("x" * MAX_MESSAGE_BYTES) == "x" * MAX_MESSAGE_BYTES


def test_an_oversized_compressible_item_is_gzipped_and_an_incompressible_one_is_for_the_store() -> (
    None
):
    """Too large plain: a gzip envelope if that fits, else the packed bytes for the store."""
    compressible = "y" * (300 * 1024)
    envelope = single_message(compressible)
    assert isinstance(envelope, str)
    assert message_bytes(envelope) <= MAX_ENVELOPE_BYTES
    assert open_message(envelope, None).texts == [compressible]
    noise = base64.b64encode(random.Random(1).randbytes(100 * 1024)).decode()
    packed = single_message(noise)
    assert isinstance(packed, Packed)
    assert unpack(packed) == [noise]


def test_an_item_that_looks_like_an_envelope_is_wrapped_so_it_round_trips() -> None:
    """On a plain-text queue the reserved key stays usable in items: such an item is enveloped."""
    tricky = json.dumps({ENVELOPE_KEY: {"v": 1, "kind": "blob", "blob": NAME}})
    assert is_reserved(tricky)
    content = single_message(tricky)
    assert isinstance(content, str)
    assert content != tricky
    assert open_message(content, None).texts == [tricky]


def test_batching_packs_items_into_about_as_few_messages_as_their_compressed_size_needs() -> None:
    """20,000 items become ceil(compressed size / limit) messages or barely more, each under 64 KiB,
    holding every item once, in order."""
    texts = orders(20_000)
    planned = plan_batches(texts)
    minimum = math.ceil(len(inline_envelope(pack(texts))) / MAX_ENVELOPE_BYTES)
    assert minimum >= 3  # the test is about several messages
    assert len(planned) <= minimum + 1
    assert all(p.content is not None for p in planned)
    assert all(message_bytes(str(p.content)) <= MAX_MESSAGE_BYTES for p in planned)
    assert [t for p in planned for t in open_message(str(p.content), None).texts] == texts


@pytest.mark.parametrize("seed", range(5))
def test_each_batch_is_the_longest_run_that_fits(seed: int) -> None:
    """Greedy and maximal: every batch fits, and no batch could have taken its next item too
    (items of mixed size and compressibility, a small limit to make many batches)."""
    rng = random.Random(seed)
    texts = [
        rng.choice(["a" * rng.randint(0, 400), rng.randbytes(rng.randint(0, 300)).hex()])
        for _ in range(300)
    ]
    limit = 2000
    planned = plan_batches(texts, max_envelope_bytes=limit)
    assert [t for p in planned for t in p.texts] == texts
    start = 0
    for message in planned:
        end = start + len(message.texts)
        if message.content is not None:
            assert message_bytes(message.content) <= limit
        if end < len(texts):
            assert message_bytes(inline_envelope(pack(texts[start : end + 1]))) > limit
        start = end


def test_large_items_leave_the_batch_and_travel_alone_in_place() -> None:
    """An item larger than a message splits the run around it; a lone small item stays plain."""
    big = "b" * (MAX_MESSAGE_BYTES + 1)
    planned = plan_batches(["a1", "a2", big, "c1"])
    assert [p.texts for p in planned] == [["a1", "a2"], [big], ["c1"]]
    assert [p.content is None for p in planned] == [False, True, True]


def test_nothing_to_batch_plans_no_message() -> None:
    """An empty input gives an empty plan."""
    assert plan_batches([]) == []


# -- local payload stores --------------------------------------------------------------------


@pytest.fixture(params=["memory", "folder"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> PayloadStore:
    if request.param == "memory":
        return InMemoryPayloadStore()
    return FolderPayloadStore(tmp_path / "payloads")


def test_a_store_keeps_bytes_until_deleted_and_deleting_twice_is_fine(store: PayloadStore) -> None:
    """put, get, delete; a missing payload is PayloadNotFoundError; delete is idempotent."""
    name = new_payload_name("orders")
    data = random.Random(3).randbytes(1 << 20)
    store.put(name, data)
    assert store.get(name) == data
    store.put(name, b"replaced")
    assert store.get(name) == b"replaced"
    store.delete(name)
    store.delete(name)
    with pytest.raises(PayloadNotFoundError):
        store.get(name)


def test_a_store_accepts_only_names_of_the_form_it_writes(store: PayloadStore) -> None:
    """Names come from queue messages: nothing may point outside the store."""
    for bad in [
        "../outside",
        "orders/../../x",
        "/etc/passwd",
        "orders/notHex",
        "Orders/" + "0" * 32,
    ]:
        with pytest.raises(ValueError, match="invalid payload name"):
            store.put(bad, b"x")


def test_the_folder_store_writes_atomically_and_leaves_only_payload_files(tmp_path: Path) -> None:
    """After puts and deletes, the folder holds exactly the live payloads, no temporary files."""
    store = FolderPayloadStore(tmp_path)
    names = sorted(new_payload_name("orders") for _ in range(3))
    for name in names:
        store.put(name, b"data")
    store.delete(names[0])
    assert store.names() == names[1:]
    assert sorted(p.name for p in (tmp_path / "orders").iterdir()) == [n[7:] for n in names[1:]]


def test_open_payload_store_matches_the_queue_backend(tmp_path: Path) -> None:
    """memory:// → memory; sqlite → the payloads folder beside the database."""
    assert isinstance(open_payload_store("memory://"), InMemoryPayloadStore)
    folder = open_payload_store(f"sqlite:///{tmp_path}/data/queues.db")
    assert isinstance(folder, FolderPayloadStore)
    assert folder.root == tmp_path / "data" / "payloads"
    assert isinstance(open_payload_store(None, default_path=tmp_path / "q.db"), FolderPayloadStore)


def test_an_azure_string_with_a_queue_endpoint_needs_a_blob_endpoint_too() -> None:
    """Explicit endpoints without a BlobEndpoint are refused, without quoting the string."""
    queue_only = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};"
        "QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
    )
    with pytest.raises(ConfigurationError, match="BlobEndpoint") as raised:
        open_payload_store(queue_only)
    assert ACCOUNT_KEY not in str(raised.value)
    both = queue_only + "BlobEndpoint=http://127.0.0.1:2/devstoreaccount1;"
    store = open_payload_store(both)
    assert type(store).__name__ == "AzureBlobPayloadStore"
    store.close()


def test_an_envelope_carries_earlier_attempts_and_a_requeue_forgets_them() -> None:
    """``attempts`` round-trips (0 when absent) and ``without_attempts`` drops it for a fresh
    start, leaving every other text as it is."""
    texts = orders(3)
    retried = inline_envelope(pack(texts), attempts=2)
    assert envelope_fields(retried)["attempts"] == 2
    assert open_message(retried, None).attempts == 2
    fresh = without_attempts(retried)
    assert "attempts" not in envelope_fields(fresh)
    assert open_message(fresh, None).texts == texts
    assert open_message(fresh, None).attempts == 0
    assert without_attempts("plain item") == "plain item"
    assert without_attempts(_with({"attempts": -1})) == _with({"attempts": -1})
