"""The benchmarks' instruments: the latency proxy, the CPU meter, the client profile's summary."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from azure.storage.queue import QueueClient

from tests.benchmarks.call_profile import summarize_calls
from tests.benchmarks.drain_support import tree_cpu_s
from tests.benchmarks.profile_client import OTHER, layer_of, parse, summarize
from tests.support.azurite import REPO_ROOT, AzuriteProcess
from tests.support.latency_proxy import latency_proxy_process

DELAY_S = 0.05
BURN = "sum(range(10_000_000)); print('burnt', flush=True); import sys; sys.stdin.read()"
"""A child that spends a fixed amount of CPU, says so, then waits for its stdin to close."""


def test_requests_through_the_latency_proxy_are_answered_each_after_its_delay(
    azurite: AzuriteProcess,
) -> None:
    """Through the proxy the SDK's requests reach Azurite, none answered before its delay."""
    with latency_proxy_process(azurite.queue.port, DELAY_S) as proxy:
        proxied = azurite.connection_string.replace(f":{azurite.queue.port}/", f":{proxy.port}/")
        with QueueClient.from_connection_string(proxied, "latency-proxy") as queue:
            queue.create_queue()
            started = time.monotonic()
            queue.send_message("one")
            queue.send_message("two")
            got = [message.content for message in queue.receive_messages(max_messages=2)]
            elapsed_s = time.monotonic() - started
    assert sorted(got) == ["one", "two"]
    assert elapsed_s >= 3 * DELAY_S  # a lower bound: load can only add to it


def test_the_cpu_of_a_process_tree_leaves_out_the_subtrees_excluded() -> None:
    """A child's CPU counts in its parent's tree, and not once the child is excluded."""
    child = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "burnt\n"
        child_s = tree_cpu_s(child.pid)
        with_child_s = tree_cpu_s(os.getpid())
        without_child_s = tree_cpu_s(os.getpid(), exclude=[child.pid])
    finally:
        child.communicate("")
    assert child_s is not None
    assert child_s > 0.05
    assert with_child_s is not None
    assert without_child_s is not None
    # Read one after the other, so this process's own CPU may have grown in between.
    assert with_child_s - without_child_s >= child_s - 0.05


def test_the_client_profile_counts_each_busy_sample_for_its_innermost_known_layer() -> None:
    """A stdlib leaf counts for the layer that called it, waits and the harness count apart."""
    thread = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"
    send = f"{thread};RequestsTransport.send (core/pipeline/transport/_requests_basic.py:381)"
    raw = [
        f"{send};StorageHeadersPolicy.on_request (queue/_shared/policies.py:9);uuid4 (uuid.py:1) 3",
        f"{send};HTTPResponse.begin (http/client.py:325);SocketIO.readinto (socket.py:706) 5",
        f"{thread};HandlerPool._work (listener/consumer/in_flight.py:104) 2",
        f"{thread};put (tests/benchmarks/drain_support.py:80);QueueClient.send_message (x.py:1) 7",
        "<module> (tests/benchmarks/profile_drain.py:1);<module> (aiohttp/client.py:1) 4",
        f"{thread};_Adapter.send (listener/stores/http_session.py:79) 1",
    ]
    summary = summarize(parse(raw))
    assert summary["busy_samples"] == 4
    assert summary["waiting_samples"] == 7
    assert [(layer["layer"], layer["samples"]) for layer in summary["layers"]] == [
        ("azure-core pipeline policies (incl. the storage SDK's)", 3),
        ("cloudqueue (listener, workers)", 1),
    ]
    assert summary["layers"][0]["top_frames"] == [
        {"frame": "StorageHeadersPolicy.on_request (_shared/policies.py)", "samples": 3}
    ]


def test_the_call_profile_counts_a_builtin_for_the_layers_that_called_it() -> None:
    """Own time of a function without a layer goes up its call paths, shared as they spent it;
    a stdlib function called by a stdlib function counts for the first layered caller above."""
    policy = ("/site-packages/azure/storage/queue/_shared/policies.py", 9, "on_request")
    process = ("/work/listener/consumer/processing.py", 1, "process")
    uuid4 = ("/usr/lib/python3.11/uuid.py", 1, "uuid4")
    urandom = ("~", 0, "<built-in method posix.urandom>")
    orphan = ("~", 0, "<built-in method builtins.len>")
    stats = {
        policy: (10, 10, 0.004, 0.010, {}),
        process: (10, 10, 0.002, 0.003, {}),
        uuid4: (
            20,
            20,
            0.002,
            0.005,
            {policy: (15, 15, 0.0015, 0.004), process: (5, 5, 0.0005, 0.001)},
        ),
        urandom: (20, 20, 0.003, 0.003, {uuid4: (20, 20, 0.003, 0.003)}),
        orphan: (4, 4, 0.001, 0.001, {}),
    }
    summary = summarize_calls(stats, 10, layer_of, OTHER)
    by_layer = {layer["layer"]: layer for layer in summary["layers"]}
    sdk = by_layer["azure-core pipeline policies (incl. the storage SDK's)"]
    ours = by_layer["cloudqueue (listener, workers)"]
    # The policy: its own 4 ms, 3/4 of uuid4's 2 ms and 3/4 of urandom's 3 ms; per message.
    assert sdk["own_us_per_msg"] == pytest.approx(1e6 * (0.004 + 0.75 * 0.002 + 0.75 * 0.003) / 10)
    assert ours["own_us_per_msg"] == pytest.approx(1e6 * (0.002 + 0.25 * 0.002 + 0.25 * 0.003) / 10)
    assert sdk["calls_per_msg"] == pytest.approx((10 + 0.75 * 20 + 0.75 * 20) / 10)
    assert by_layer[OTHER]["top_functions"] == [
        {"function": "<built-in method builtins.len>", "own_us_per_msg": 100.0}
    ]


PROFILED_THREADS = """
import threading
from tests.benchmarks.call_profile import EveryThreadProfile

def work():
    for _ in range(7):
        sorted([3, 1, 2])

release = threading.Event()
with EveryThreadProfile() as profile:
    ended = threading.Thread(target=work)
    ended.start()
    ended.join()
    running = threading.Thread(target=lambda: (sorted([1]), release.wait()))
    running.start()
    sorted([2, 1])
    stats = profile.stats()
sorts = sum(e[1] for k, e in stats.items() if k[2] == "<built-in method builtins.sorted>")
print(sorts, profile.still_running)
release.set()
"""
"""A child process: a pytest worker's own leftover threads would be profiled too."""


def test_a_call_profile_counts_the_entering_thread_and_each_ended_thread() -> None:
    """Calls on a thread started inside the profile count once it has ended, with the entering
    thread's; a thread still running is left out, and counted as such."""
    child = subprocess.run(
        [sys.executable, "-c", PROFILED_THREADS],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert child.stdout.split() == ["8", "1"]
