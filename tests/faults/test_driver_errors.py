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
            if os.environ.get("SWEEPLAB_TEST_ASK_RAISES") == "UserError":
                from sweeplab.errors import UserError

                raise UserError("bad input found mid-sweep for the test")
            raise ValueError("searcher bug for the test")
        _asked.append(1)
        return _ask(self)

    SequentialSearcher.ask = ask
"""


@pytest.mark.parametrize("error", ["ValueError", "UserError"])
def test_a_searcher_that_raises_stops_the_sweep_resumably_with_its_traceback(chaos, tmp_path, error):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    chaos.spec("se", chaos.faulty_spec("stepper", method="random", params=chaos.params(
        x="{min: 0.0, max: 1.0}", steps=16, delay=0.05), extra="name: se\nbudget: {trials: 5}"))
    env = chaos.env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject), env.get("PYTHONPATH")) if p)
    env["SWEEPLAB_TEST_ASK_FAILS_AFTER"] = "3"
    env["SWEEPLAB_TEST_ASK_RAISES"] = error
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "sweep", "se.yaml", "-w", "2", "-q"], cwd=chaos.tmp,
                        env=env, capture_output=True, text=True, timeout=120)
    if error == "ValueError":   # a bug: exit 1 with the traceback, for a bug report
        assert cp.returncode == 1, (cp.stdout, cp.stderr)
        assert "ValueError: searcher bug for the test" in cp.stderr
        assert "Traceback" in cp.stderr and "in ask" in cp.stderr
        said = "searcher bug for the test"
    else:                       # bad input found mid-sweep: exit 2, its message, no traceback
        assert cp.returncode == 2, (cp.stdout, cp.stderr)
        said = "bad input found mid-sweep for the test"
        assert said in cp.stderr and "Traceback" not in cp.stderr
    assert "sweeplab resume se" in cp.stderr
    [sweep] = chaos.rows("SELECT state, end_reason FROM sweeps WHERE name='se'")
    assert sweep["state"] == "stopped" and said in sweep["end_reason"]
    states = [t["state"] for t in chaos.trials("se")]
    # the ask after the third trial raised as one trial ended, with another still running: left interrupted
    assert "running" not in states and len(states) == 3 and "interrupted" in states, states
    assert not chaos.stray_workers()

    done = chaos("resume", "se", "-q")   # the fault gone: the sweep finishes its budget
    assert done.returncode == 0, done.stderr
    assert [t["state"] for t in chaos.trials("se")] == ["completed"] * 5
