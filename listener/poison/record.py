"""What the poison queue keeps about a message given up on, and reading it back without trust.

Anyone who may add messages to ``<queue>-poison`` can write anything there, and an original
message near 64 KiB is kept there unwrapped (its record would not fit). So a poison message is
read with every field's type checked: ``parse_record`` returns a valid ``PoisonRecord`` or raises
``UnreadableRecordError`` saying what is wrong, never another exception, whatever the text
(not JSON, nested too deeply for the parser, wrong types, missing fields).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from cloudqueue.listener.errors import UnreadableRecordError


@dataclass(frozen=True, slots=True)
class PoisonRecord:
    """What the poison queue keeps about a message that was given up on."""

    queue: str
    original_id: str
    dequeue_count: int
    inserted_on: str
    poisoned_on: str
    reason: str
    error: str
    """The error that decided it (the last one)."""
    first_error: str
    """The first error this worker saw for the message (equal to ``error`` if only one)."""
    worker: str
    content: str
    partition: str | None = None
    """The physical queue of a partitioned queue the message came from (``orders-p2``)."""

    def to_json(self) -> str:
        values = asdict(self)
        if self.partition is None:
            del values["partition"]  # a plain queue's record stays as it always was
        return json.dumps(values, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PoisonRecord:
        """The record in ``text``; UnreadableRecordError (a ValueError) when it holds none."""
        return parse_record(text)


OPTIONAL = frozenset({"first_error", "partition"})
"""Fields a record may lack: older records have no ``first_error``, plain queues no partition."""


def parse_record(text: str) -> PoisonRecord:
    """The record in a poison message's text, every field checked; UnreadableRecordError if none.

    Fields the record does not know are ignored, so a newer worker's record still reads.
    """
    try:
        values = json.loads(text)
    except RecursionError:
        raise UnreadableRecordError("JSON nested too deeply", claims_record=False) from None
    except ValueError:
        raise UnreadableRecordError("not JSON", claims_record=False) from None
    if not isinstance(values, dict):
        kind = type(values).__name__
        raise UnreadableRecordError(f"JSON {kind}, not an object", claims_record=False)
    if "original_id" not in values:
        raise UnreadableRecordError("a JSON object without original_id", claims_record=False)
    if "first_error" not in values and isinstance(values.get("error"), str):
        values["first_error"] = values["error"]  # written before records had it
    known = {field.name: values.get(field.name) for field in fields(PoisonRecord)}
    problems = [_problem(name, value) for name, value in known.items()]
    if any(problems):
        problem = "; ".join(p for p in problems if p)
        raise UnreadableRecordError(f"a forged or damaged record: {problem}", claims_record=True)
    return PoisonRecord(**known)  # type: ignore[arg-type]  # each field's type checked above


def _problem(name: str, value: Any) -> str | None:
    """What is wrong with one field's value, or None."""
    if value is None:
        return None if name in OPTIONAL else f"{name} missing"
    wanted = int if name == "dequeue_count" else str
    if type(value) is not wanted:  # not isinstance: True is no dequeue count
        return f"{name} is {type(value).__name__}, not {wanted.__name__}"
    return None


def read_record(poison_text: str) -> PoisonRecord | None:
    """The record a poison message carries; None when it holds none (see ``parse_record``)."""
    try:
        return parse_record(poison_text)
    except UnreadableRecordError:
        return None


__all__ = ["PoisonRecord", "parse_record", "read_record"]
