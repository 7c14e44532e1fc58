"""A driver that ran in another pid namespace on this host (a container started with the host's network, so
with its host name; `unshare --pid`) and was killed there. Its recorded pid means nothing here: it may be a
live process of this namespace started earlier (a kernel thread, the init), which the driver check took for
the driver itself, alive."""

from __future__ import annotations

import shutil
import subprocess
import sys

import psutil
import pytest

pytestmark = pytest.mark.slow


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare --pid` (root, or user namespaces)")
def test_a_killed_driver_of_another_pid_namespace_is_not_taken_for_a_live_one(chaos, reap):
    """The driver runs in a new pid namespace (its pid there: 2) and is killed with `kill -9`; this host's pid 2
    is another process, started before it. `resume` here was refused ("already being run by pid 2; `sweeplab
    stop` stops it", and that stop would have signalled the unrelated process). The driver records its pid
    namespace; one of another namespace is not looked up here (as one of another host): `resume` continues the
    sweep."""
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.5, steps=40, delay=0.05),
                             extra="budget: {trials: 1}")
    spec = chaos.spec("ns", body)
    cmd = f"{sys.executable} -m sweeplab sweep {spec} --name ns -q -w 1; true"   # the driver: pid 2 in there
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", cmd], cwd=chaos.tmp,
                             env=chaos.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    reap.append(outer.pid)
    chaos.wait_for(lambda: chaos.running_attempt("ns", 0), what="trial 0 running", proc=outer)
    drivers = [p for p in psutil.Process(outer.pid).children(recursive=True)
               if "sweep" in p.cmdline() and "sweeplab" in " ".join(p.cmdline())]
    assert len(drivers) == 1, drivers
    drivers[0].kill()
    outer.communicate(timeout=60)
    cp = chaos("resume", "ns", "-q")
    assert cp.returncode == 0, cp.stderr
    (trial,) = chaos.trials("ns")
    assert trial["state"] == "completed", dict(trial)
