"""An error inside the driver itself (a searcher that raises: a bug, or a MemoryError from a model too large):
the sweep stops as Ctrl-C stops it, with the error named and its traceback shown, exit 1, running trials
left `interrupted` and the sweep `stopped` (not `running` with no driver), and `sweeplab resume` finishes it.

The fault is injected into the real CLI's driver process by a `sitecustomize` on its PYTHONPATH that makes
the random searcher's `ask` raise after a number of trials (workers never ask)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SITECUSTOMIZE = """\
import os

_after = os.environ.get("SWEEPLAB_TEST_ASK_FAILS_AFTER")
if _after:
    from sweeplab.search.base import SequentialSearcher

    _ask = SequentialSearcher.ask
    _asked = []

    def ask(self):
        if len(_asked) >= int(_after):
            raise ValueError("searcher bug for the test")
        _asked.append(1)
        return _ask(self)

    SequentialSearcher.ask = ask
"""


def test_a_searcher_that_raises_stops_the_sweep_resumably_with_its_traceback(chaos, tmp_path):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    chaos.spec("se", chaos.faulty_spec("stepper", method="random", params=chaos.params(
        x="{min: 0.0, max: 1.0}", steps=40, delay=0.05), extra="name: se\nbudget: {trials: 5}"))
    env = chaos.env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject), env.get("PYTHONPATH")) if p)
    env["SWEEPLAB_TEST_ASK_FAILS_AFTER"] = "3"
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "se.yaml", "-w", "2", "-q"], cwd=chaos.tmp,
                        env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "ValueError: searcher bug for the test" in cp.stderr
    assert "Traceback" in cp.stderr and "in ask" in cp.stderr   # where it happened, for a bug report
    assert "sweeplab resume se" in cp.stderr
    [sweep] = chaos.rows("SELECT state, end_reason FROM sweeps WHERE name='se'")
    assert sweep["state"] == "stopped" and "searcher bug for the test" in sweep["end_reason"]
    states = [t["state"] for t in chaos.trials("se")]
    assert "running" not in states and len(states) == 3, states
    assert not chaos.stray_workers()

    done = chaos("resume", "se", "-q")   # the fault gone: the sweep finishes its budget
    assert done.returncode == 0, done.stderr
    assert [t["state"] for t in chaos.trials("se")] == ["completed"] * 5
