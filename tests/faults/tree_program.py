"""A command trial's program for the process-tree tests: it starts a child and both write their pids.

    python tree_program.py --pids=DIR [--mode=run|freeze|silent] [--steps=N] [--ignore_term=1] [--setsid_child=1]

Writes DIR/<trial>-<attempt>-program.pid and DIR/<trial>-<attempt>-child.pid (the child is a second Python
process that sleeps; with --setsid_child=1 it starts a session of its own, as torchrun ranks may). The program
restores its step from the trial's checkpoint directory (sweeplab's CheckpointManager), writes
DIR/<trial>-<attempt>-restored with the restored step (-1: none), then reports and checkpoints one step every
0.2 s. --mode=freeze: attempt 1 stops itself with SIGSTOP after step 1; --mode=silent: it sleeps silently
instead; --mode=compute: it computes silently for 3.5 s (no output, no report, no checkpoint), then goes on.
--ignore_term=1: the program and its child ignore SIGTERM (only a SIGKILL ends them).
--wait_for=FILE: attempts after the first wait (up to 60 s) for FILE to exist before they restore.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

_CHILD = """
import os, signal, sys, time
if sys.argv[2] == "1":
    os.setsid()
if sys.argv[3] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(0.2)
"""


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main() -> None:
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    tag = os.path.join(args["pids"], f"{os.environ['SWEEPLAB_TRIAL']}-{os.environ['SWEEPLAB_ATTEMPT']}")
    ignore = args.get("ignore_term", "0")
    if ignore == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", _CHILD, tag + "-child.pid", args.get("setsid_child", "0"), ignore])
    _write(tag + "-program.pid", str(os.getpid()))
    from sweeplab import report
    from sweeplab.checkpoint import CheckpointManager

    if args.get("wait_for") and os.environ["SWEEPLAB_ATTEMPT"] != "1":
        deadline = time.monotonic() + 60
        while not os.path.exists(args["wait_for"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
    found = mgr.latest()
    start = int(found[1]["step"]) + 1 if found else 0
    _write(tag + "-restored", str(start - 1))
    mode, attempt = args.get("mode", "run"), os.environ["SWEEPLAB_ATTEMPT"]
    for step in range(start, int(args.get("steps", "100000"))):
        report(loss=1.0 / (step + 1), step=step)
        mgr.save({"step": step}, step=step)
        if step == 1 and attempt == "1" and mode == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)
        if step == 1 and attempt == "1" and mode == "silent":
            time.sleep(100000)
        if step == 1 and attempt == "1" and mode == "compute":
            end = time.monotonic() + 3.5
            while time.monotonic() < end:
                pass
        time.sleep(0.2)


if __name__ == "__main__":
    main()
