"""Hostile messages for a worker of ``{"n": int}`` items, each with the outcome it must have.

A seeded generator makes a few of each kind (truncated, oversize, wrong types, deep, bombs,
forged envelopes and trace context, invalid base64 / UTF-8) around ordinary items, so a run shows
that every input ends where it should and that ordinary work keeps flowing.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from cloudqueue.listener.stores.payload_store import new_payload_name
from cloudqueue.listener.wire.envelope import ENVELOPE_KEY, blob_envelope, inline_envelope
from cloudqueue.listener.wire.frames import pack

EMPTY_ITEM = b"\0\0\0\x02{}"
"""One frame of the item ``{}`` as a batch stores it: its length (4 bytes), then its bytes."""

MAX_CONTENT_BYTES = 65_535


@dataclass(frozen=True)
class Case:
    """A message's text and its fate: ``handled`` (the item numbers it carries, each handled
    once) or ``poisoned`` with ``reason``."""

    kind: str
    content: str
    handled: tuple[int, ...] = ()
    reason: str | None = None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def item(n: int) -> str:
    """An ordinary item as a producer writes it (base64 of JSON, the default)."""
    return b64(json.dumps({"n": n}).encode())


def envelope(**fields: object) -> str:
    """A batch envelope of two ordinary-looking items, with ``fields`` replacing its own."""
    base = json.loads(inline_envelope(pack([item(0), item(1)])))[ENVELOPE_KEY]
    return json.dumps({ENVELOPE_KEY: {**base, **fields}})


def gzip_bomb(frames: int, *, count: int) -> str:
    """A batch envelope whose gzip data inflates to ``frames`` items ``{}``, announcing ``count``;
    its text stays within one queue message."""
    data = gzip.compress(EMPTY_ITEM * frames, compresslevel=9, mtime=0)
    fields = {"v": 1, "kind": "batch", "count": count, "inner": "text", "data": b64(data)}
    content = json.dumps({ENVELOPE_KEY: fields})
    assert len(content) <= MAX_CONTENT_BYTES, len(content)
    return content


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


class HostileMix:
    """Ordinary items and hostile messages in a seeded random order."""

    def __init__(self, seed: int, *, queue_name: str, foreign_claim_check: str) -> None:
        self.rng = random.Random(seed)
        self.next_n = 0
        self.queue_name = queue_name
        self.foreign_claim_check = foreign_claim_check

    def cases(self, ordinary: int) -> list[Case]:
        made = [self._ordinary() for _ in range(ordinary)]
        for make in self._makers():
            made += [make() for _ in range(2)]
        self.rng.shuffle(made)
        return made

    def _number(self) -> int:
        self.next_n += 1
        return self.next_n

    def _ordinary(self) -> Case:
        n = self._number()
        return Case("ordinary", item(n), handled=(n,))

    def _makers(self) -> list[Callable[[], Case]]:
        return [
            self._truncated,
            self._wrong_type,
            self._deep_item,
            self._deep_envelope,
            self._too_many_items,
            self._gzip_bomb,
            self._foreign,
            self._missing_payload,
            self._forged_envelope,
            self._forged_trace,
            self._invalid_base64,
            self._invalid_utf8,
        ]

    def _truncated(self) -> Case:
        text = json.dumps({"n": self._number(), "note": "x" * self.rng.randint(5, 50)})
        cut = text[: self.rng.randint(1, len(text) - 1)]
        return Case(
            "truncated JSON", self.rng.choice([cut, b64(cut.encode())]), reason="undecodable"
        )

    def _wrong_type(self) -> Case:
        value = self.rng.choice([[1, 2, 3], "a string", 42, True, None, 1.5])
        return Case("wrong type", b64(json.dumps(value).encode()), reason="undecodable")

    def _deep_item(self) -> Case:
        text = '{"n": 1, "deep": ' + nested(self.rng.randint(65, 20_000)) + "}"
        return Case("deep item", self.rng.choice([text, b64(text.encode())]), reason="over_limit")

    def _deep_envelope(self) -> Case:
        text = '{"' + ENVELOPE_KEY + '": ' + nested(self.rng.randint(100, 20_000)) + "}"
        return Case("deep envelope", text, reason="over_limit")

    def _too_many_items(self) -> Case:
        return Case(
            "oversize count", envelope(count=self.rng.randint(10_001, 10**9)), reason="over_limit"
        )

    def _gzip_bomb(self) -> Case:
        frames = self.rng.randint(3_000_000, 5_000_000)
        count = self.rng.choice([frames, 1, 10_000])
        return Case("gzip bomb", gzip_bomb(frames, count=count), reason="over_limit")

    def _foreign(self) -> Case:
        return Case("foreign claim-check", self.foreign_claim_check, reason="payload_foreign")

    def _missing_payload(self) -> Case:
        content = blob_envelope(new_payload_name(self.queue_name), pack([item(self._number())]))
        return Case("missing payload", content, reason="payload_missing")

    def _forged_envelope(self) -> Case:
        forged: dict[str, object] = self.rng.choice(
            [
                {"v": 2},
                {"kind": "zip"},
                {"count": True},
                {"attempts": -1},
                {"data": "not base64!"},
                {"data": b64(b"not gzip at all")},
                {"kind": "blob", "blob": "../../etc/passwd"},
                {"kind": "blob", "blob": new_payload_name("somequeue") + "\n"},
                {"inner": "rot13"},
            ]
        )
        return Case("forged envelope", envelope(**forged), reason="undecodable")

    def _forged_trace(self) -> Case:
        n, m = self._number(), self._number()
        fields = json.loads(inline_envelope(pack([item(n), item(m)])))[ENVELOPE_KEY]
        trace: dict[str, object] = self.rng.choice(
            [
                {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
                {"traceparent": "zz-not-a-trace", "tracestate": "k=v"},
                {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
                {
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                    "tracestate": "k=" + "v" * 5_000,
                },
                {"traceparent": ["not", "a", "string"], "tracestate": {"a": 1}},
            ]
        )
        content = json.dumps({ENVELOPE_KEY: {**fields, **trace}})
        return Case("forged trace context", content, handled=(n, m))

    def _invalid_base64(self) -> Case:
        text = self.rng.choice(["eyJuIjog!!!", "e30", "eyJuIjogMX0", "====", "eyJu\u00e9IjogMX0="])
        return Case("invalid base64", text, reason="undecodable")

    def _invalid_utf8(self) -> Case:
        raw = self.rng.choice([b'\xff{"n": 1}', b'{"n": "\xc3\x28"}', b"\xed\xa0\x80"])
        return Case("invalid UTF-8", b64(raw), reason="undecodable")
