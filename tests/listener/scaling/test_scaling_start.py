"""Start-up does not cap scaling: a fresh worker behind a slow head grows to reach the fast items.

Issue 26: the first CPU reading spanned start-up, so the first scale-up was refused
(``scaling_capped``) and nothing looked again until a message finished; 100 fast items behind 8
slow ones waited for the slow ones. Now the first reading starts at the first decision, and a
capped scale-up is re-evaluated every ``rescale_interval_s``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.runs import Runs, run_environment

SLOW = 8
FAST = 100
SLOW_S = 3.0


def test_a_fresh_worker_handles_the_fast_items_while_a_slow_head_runs(tmp_path: Path) -> None:
    """8 slow items (3 s each) at the head, 100 fast ones behind: >= 90 of the fast ones are
    handled before any slow one has finished."""
    # Its on_start keeps a core busy for half a second, as loading a model or a cache would; the
    # saturation threshold is low enough that this start-up trips it on a machine however loaded.
    env = {
        **run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path),
        "TEST_START_CPU_S": "0.5",
        "CLOUDQUEUE_SCALING__CPU_SATURATION_CORES": "0.2",
    }
    slow: list[dict[str, float]] = [{"n": n, "delay_s": SLOW_S} for n in range(SLOW)]
    fast: list[dict[str, float]] = [{"n": n} for n in range(SLOW, SLOW + FAST)]
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin="\n".join(map(json.dumps, slow + fast)))
    runs = Runs(tmp_path)
    run = runs.start(env)
    try:
        eventually(lambda: run.handled() & set(range(SLOW)), timeout_s=60)  # a slow one is done
        handled_before = run.handled() - set(range(SLOW))
        assert len(handled_before) >= 90, run.events("scaling_capped")
        print(f"fast items handled before a slow one finished: {len(handled_before)}/{FAST}")
    finally:
        runs.kill_all()
