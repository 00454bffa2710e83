"""How a logical queue is split into physical queues, and which partition a key belongs to.

The naming rule: a logical queue ``orders`` with ``K`` partitions is the queues ``orders-p0`` ...
``orders-p{K-1}``; with ``K = 1`` it is the queue ``orders`` itself, byte for byte the queue a
worker without partitions uses. Every name obeys Azure's rule (3-63 lowercase letters, digits and
single hyphens), so a logical name is at most ``63 - len("-p{K-1}")`` characters long.

Keys are hashed with BLAKE2b, not ``hash()``: Python salts ``hash`` of a string per process
(PYTHONHASHSEED), which would send one key to different partitions from different publishers.
"""

from __future__ import annotations

import hashlib
import re

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.storage import validate_queue_name

PARTITION_SEPARATOR = "-p"
"""Between a logical queue's name and a partition's index: ``orders-p3``."""

MAX_PARTITIONS = 1000
"""A sanity bound: more partitions than this is a configuration mistake, not a design."""


def check_partitions(partitions: int) -> int:
    """Return ``partitions`` if it is a whole number 1..MAX_PARTITIONS; else ConfigurationError."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ConfigurationError(f"partitions must be a whole number, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigurationError(f"partitions must be 1..{MAX_PARTITIONS}, got {partitions}")
    return partitions


def partition_queue_name(queue_name: str, index: int, partitions: int) -> str:
    """The physical queue of partition ``index`` of ``partitions`` (the queue itself when 1)."""
    if partitions == 1:
        return queue_name
    return f"{queue_name}{PARTITION_SEPARATOR}{index}"


def partition_queue_names(queue_name: str, partitions: int) -> list[str]:
    """The physical queues of a logical queue, partition 0 first; ConfigurationError naming the
    rule when the logical name is invalid or too long for its partitions' names."""
    check_partitions(partitions)
    validate_queue_name(queue_name)
    names = [partition_queue_name(queue_name, index, partitions) for index in range(partitions)]
    longest = names[-1]
    try:
        validate_queue_name(longest)
    except ConfigurationError:
        raise ConfigurationError(
            f"queue name {queue_name!r} is too long for {partitions} partitions: its last "
            f"partition {longest!r} has {len(longest)} characters and Azure allows 3-63 "
            f"(use a name of at most {63 - len(longest) + len(queue_name)} characters)"
        ) from None
    return names


_PARTITION_INDEX = re.compile(r"^(?P<logical>.+)-p(?P<index>0|[1-9][0-9]*)$")


def partition_of_queue(physical_name: str) -> tuple[str, int] | None:
    """The logical queue and index a physical partition name stands for, or None if it is not
    one (``orders-p3`` -> ``("orders", 3)``)."""
    match = _PARTITION_INDEX.match(physical_name)
    if match is None:
        return None
    return match["logical"], int(match["index"])


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition that ``key`` always lands on, in every process and on every machine."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions
