"""A sweep's lock held from another machine or container (a store on a shared disk): its pid is not this host's.

`sweeplab stop` signalled that pid here, whatever process it is on this host; a refused `resume` looked it up
here too. Real CLI processes, a real flock held by another process, a real bystander process.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

_HOLD = """\
import fcntl, sys, time
fh = open(sys.argv[1], "a+")
fcntl.flock(fh, fcntl.LOCK_EX)
fh.seek(0); fh.truncate(); fh.write(sys.argv[2]); fh.flush()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("where", ["host", "pidns"])
def test_stop_never_signals_a_local_process_for_a_lock_held_elsewhere(chaos, reap, where):
    body = chaos.faulty_spec("stepper", params=chaos.params(x=0.1))
    cp = chaos("sweep", str(chaos.spec("s", body)), "--name", "far", "--workers", "1", "-q", timeout=90)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    # a bystander of this host whose pid the far driver happens to have
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    reap.append(bystander.pid)
    import os

    host, ns = ("another-machine", "pid:[1]") if where == "host" else (os.uname().nodename, "pid:[1]")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(chaos.store / "locks" / "far.lock"),
                               f"pid {bystander.pid}\nhost {host}\npidns {ns}"], stdout=subprocess.PIPE, text=True)
    reap.append(holder.pid)
    assert holder.stdout.readline().strip() == "held"
    cp = chaos("stop", "far", timeout=60)
    assert cp.returncode != 0, cp.stdout + cp.stderr
    said = " ".join((cp.stdout + cp.stderr).split())
    expected = "host another-machine" if where == "host" else "another pid namespace"
    assert expected in said and "run `sweeplab stop` there" in said, said
    assert bystander.poll() is None, "stop signalled a process of this host for a lock held elsewhere"
    # a resume is refused naming where the driver runs, not a pid of this host
    cp = chaos("resume", "far", "-q", timeout=60)
    assert cp.returncode != 0 and expected in " ".join((cp.stdout + cp.stderr).split()), cp.stdout + cp.stderr
    assert bystander.poll() is None
    holder.kill()


def test_a_lock_of_an_older_sweeplab_naming_only_a_pid_is_this_host_s(tmp_path):
    from sweeplab.driver.recovery import read_lock

    (tmp_path / "locks").mkdir()
    with open(tmp_path / "locks" / "old.lock", "w") as fh:
        fh.write("pid 4242\nstopping 12.5")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_EX)
        # another open file description: flock conflicts with it even in this process
        got = read_lock(tmp_path, "old")
    assert got is not None and (got.pid, got.stopping, got.elsewhere) == (4242, 12.5, None)
