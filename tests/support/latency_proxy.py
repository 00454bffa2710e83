"""A reverse proxy that adds a fixed latency to every request: Azurite with a region's distance.

Each client connection gets one upstream connection of its own (keep-alive preserved, so Azurite
sees what it would see without the proxy), and every byte the client sends reaches Azurite
``delay_s`` after it arrived: a request is answered ``delay_s`` later than it would be. Responses
pass straight through. It reuses ``FaultProxy``'s server (a loop on a background thread) and
replaces only the per-connection forwarding.

Benchmarks run it as a process of its own, so its CPU is neither the client's nor Azurite's:
``latency_proxy_process(upstream_port, delay_s)`` (or ``python -m tests.support.latency_proxy
UPSTREAM_PORT DELAY_MS``, which prints the port it listens on and serves until stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.fault_proxy import FaultProxy

READ_SIZE = 65536
REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 10.0


@dataclass
class LatencyProxy(FaultProxy):
    """Forwards every connection to ``upstream_port``, each request delayed by ``delay_s``."""

    delay_s: float = 0.01

    def start(self) -> LatencyProxy:
        super().start()
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        upstream_reader, upstream_writer = upstream
        directions = [
            asyncio.create_task(self._delayed(reader, upstream_writer)),
            asyncio.create_task(_pipe(upstream_reader, writer)),
        ]
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping: end quietly (asyncio logs a cancelled connection task)
        finally:
            for task in directions:
                task.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
            writer.close()
            upstream_writer.close()

    async def _delayed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk sent ``delay_s`` after it arrived, in order."""
        line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def send() -> None:
            while True:
                due, data = await line.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(READ_SIZE):
                    line.put_nowait((loop.time() + self.delay_s, data))
            line.put_nowait((loop.time() + self.delay_s, b""))
            await sender
        finally:
            sender.cancel()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(READ_SIZE):
            writer.write(data)
            await writer.drain()


@dataclass(frozen=True)
class RunningProxy:
    """A latency proxy process: its pid (to meter its CPU) and the port it listens on."""

    pid: int
    port: int


@contextlib.contextmanager
def latency_proxy_process(upstream_port: int, delay_s: float) -> Iterator[RunningProxy]:
    """Run a ``LatencyProxy`` in a child process for the ``with`` block; stop it after."""
    command = [
        sys.executable,
        "-m",
        "tests.support.latency_proxy",
        str(upstream_port),
        str(1000 * delay_s),
    ]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None  # both are PIPEs
        assert process.stdin is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"latency proxy did not start (said {line!r})")
        yield RunningProxy(process.pid, int(line))
        process.stdin.close()  # the proxy's signal to stop
        process.wait(STOP_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(STOP_TIMEOUT_S)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.latency_proxy")
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("delay_ms", type=float)
    args = parser.parse_args(argv)
    proxy = LatencyProxy(args.upstream_port, delay_s=args.delay_ms / 1000).start()
    print(proxy.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or exits)
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
