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


def test_a_fresh_worker_handles_the_fast_items_while_a_slow_head_runs(tmp_path: Path) -> None:
    """8 slow items at the head, held until the test releases them, 100 fast ones behind: >= 90
    of the fast ones are handled while every slow one still runs."""
    # Its on_start keeps a core busy for half a second, as loading a model or a cache would; the
    # saturation threshold is low enough that this start-up trips it on a machine however loaded.
    env = {
        **run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path),
        "TEST_START_CPU_S": "0.5",
        "CLOUDQUEUE_SCALING__CPU_SATURATION_CORES": "0.2",
    }
    gate = tmp_path / "release-the-slow-ones"
    slow: list[dict[str, object]] = [{"n": n, "until": str(gate)} for n in range(SLOW)]
    fast: list[dict[str, object]] = [{"n": n} for n in range(SLOW, SLOW + FAST)]
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin="\n".join(map(json.dumps, slow + fast)))
    runs = Runs(tmp_path)
    run = runs.start(env)
    try:
        # Before the fix the fast ones waited for a slow one to end, and none ends until released.
        def most_fast_ones_handled() -> bool:
            fast_handled = run.handled() - set(range(SLOW))
            assert len(fast_handled) >= 90, (len(fast_handled), run.events("scaling_capped"))
            return True

        eventually(most_fast_ones_handled, timeout_s=60)
        assert not run.handled() & set(range(SLOW)), "a slow item ended before its release"
        gate.touch()
        eventually(lambda: run.handled() & set(range(SLOW)), timeout_s=30)
    finally:
        runs.kill_all()
