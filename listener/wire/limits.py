"""How much work one message may cost a listener, decided before its items are built.

Anyone who may add messages to a queue decides what the listener reads: another team's service, a
misconfigured producer, a leaked SAS with add rights. A 64 KiB message of gzip can inflate to
millions of items, and a stored payload to gigabytes, so the listener checks each limit *before*
the work it bounds: the announced item count before inflating, the inflated size while inflating
(stopping at the cap), the number of frames while splitting them, the nesting of JSON before it is
parsed. A message over a limit is poisoned at once with reason ``over_limit`` and an error naming
the limit and its setting (``LimitExceededError``); it is never retried, since it would fail the
same way each time.

A listener's memory is then bounded by the limits times the messages it opens at once (see
docs/security/threat-model.md for the figures): the inflated bytes bound the text, the JSON
values what decoding it may build. The settings are the ``[decoding]`` section of
a worker's settings (``cloudqueue.workers.settings.DecodingSettings``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.errors import ConfigurationError, LimitExceededError

MIB = 1024 * 1024

MAX_JSON_DEPTH_CEILING = 200
"""The deepest nesting a limit may allow: pydantic's JSON parser refuses more than about 200
levels itself, and Python's ``json`` would need a deeper stack than a thread is sure to have."""

SECTION = "decoding"


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive whole number, got {value!r}")


@dataclass(frozen=True, slots=True)
class DecodingLimits:
    """The most one message may hold or inflate to; the defaults suit almost every queue."""

    max_items_per_message: int = 10_000
    """Items in one batch message or stored payload."""
    max_inflated_bytes_per_message: int = 16 * MIB
    """Bytes the gzip data of a message carried inline may inflate to."""
    max_blob_payload_bytes: int = 64 * MIB
    """Bytes of a stored (claim-check) payload, both as stored and once inflated."""
    max_json_depth: int = 64
    """Levels of nested JSON objects and arrays in an envelope or a JSON item."""
    max_json_values_per_message: int = 1_000_000
    """JSON values in all of a message's items together (counted from the text before parsing:
    each ``,``, ``:``, ``[`` and ``{``). Decoded, a small value costs far more than its text: an
    empty list ``[]`` is 3 characters and about 60 bytes, so a message of 16 MiB of them would
    hold some 360 MiB. This bounds a message's decoded items whatever their shape."""

    def __post_init__(self) -> None:
        for name in self.__slots__:
            _check_positive(name, getattr(self, name))
        if self.max_json_depth > MAX_JSON_DEPTH_CEILING:
            raise ConfigurationError(
                f"max_json_depth must be at most {MAX_JSON_DEPTH_CEILING}, "
                f"got {self.max_json_depth}"
            )


DEFAULT_LIMITS = DecodingLimits()


def over_limit(what: str, limit_name: str, value: int) -> LimitExceededError:
    """The error for a message over a limit: what it holds, the limit and the setting to raise."""
    setting = f"{SECTION}.{limit_name}"
    return LimitExceededError(f"{what}: over the limit of {value:,} ({setting})", setting=setting)


__all__ = ["DEFAULT_LIMITS", "MAX_JSON_DEPTH_CEILING", "MIB", "DecodingLimits", "over_limit"]
