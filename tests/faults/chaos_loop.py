"""The chaos loop: real sweeps (function and command trials, 2 workers, checkpoints every step) hit by a fault at
a seeded random moment, then `sweeplab resume`, then the promises of docs/fault-tolerance.md checked on the store.

    python tests/faults/chaos_loop.py SEED RUNS MODE[,MODE...] [WORKDIR]

Modes: driver9 (kill -9 the driver), startup (kill -9 it in its first 0.6 s), group9 (kill -9 its process
group), worker9 (kill -9 a worker, then the driver during the retry), ckpt (kill -9 the driver as its k-th
checkpoint file appears), complete (as its k-th trial completes), trunc (truncate the newest checkpoint, kill
the workers), wterm (SIGTERM a worker), term (SIGTERM the driver), allterm (SIGTERM to every process at once,
as a container stop), stop (SIGSTOP the driver past the heartbeat timeout), rterm / rkill (kill -9 the sweep,
then SIGTERM / kill -9 its resume early), termkill (SIGTERM, then kill -9 during
the grace), fsize (RLIMIT_FSIZE on the whole sweep), ro (kill -9, then the store
read-only: readers work, resume is refused; needs root to mount a tmpfs).

After each: exactly the budgeted trials, each completed by exactly one attempt, none running; values right;
trials completed before the fault untouched; the last attempt resumed after its last recorded checkpoint;
`PRAGMA integrity_check` ok; `status` and `best` agree; no worker left. Not collected by pytest (minutes of
CPU); the seeded cases it found are tests in this directory.
"""

import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil

PY = sys.executable
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
HERE = ""  # the work directory (argv[4] or a temporary one): the trial fixtures are written there
B = 6
STEPS = 16

TRIALFN = textwrap.dedent("""
    import time
    def objective(x): return (float(x) - 0.3) ** 2
    def stepper(config, run):
        state = run.restore() or {"next": 0}
        start = int(state["next"])
        x = float(config.x)
        step = start
        while step < int(config.steps):
            run.log({"loss": objective(x) + 1.0 / (step + 1)}, step=step)
            run.checkpoint({"next": step + 1}, step=step)
            step += 1
            if run.should_stop:
                break
            time.sleep(float(config.delay))
        return {"loss": objective(x), "resumed_from": start}
""")

PROG = textwrap.dedent("""
    import json, os, sys, time
    from sweeplab.checkpoint import CheckpointManager
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    x = float(args["x"])
    mgr = CheckpointManager(os.environ["SWEEPLAB_CHECKPOINT_DIR"])
    found = mgr.latest()
    start = found[1]["next"] if found else 0
    for step in range(start, int(args["steps"])):
        print("@sweeplab " + json.dumps({"loss": (x - 0.3) ** 2 + 1.0 / (step + 1), "step": step}), flush=True)
        mgr.save({"next": step + 1}, step=step)
        time.sleep(float(args["delay"]))
    print("@sweeplab " + json.dumps({"loss": (x - 0.3) ** 2, "resumed_from": start}), flush=True)
""")


def env(store):
    e = dict(os.environ)
    e["SWEEPLAB_STORE"] = store
    e["PYTHONPATH"] = SRC + ":" + HERE
    e["COLUMNS"] = "200"
    return e


def spec(kind, d, hb="60s"):
    common = (
        f"method: random\nseed: 3\nmetric: {{name: loss, goal: minimize}}\nbudget: {{trials: {B}}}\n"
        f"trial: {{retries: 3, grace: 5s, heartbeat_timeout: {hb}}}\nparameters:\n"
        "  x: {min: -1.0, max: 1.0}\n  steps: {value: STEPS}\n  delay: {value: 0.05}\n".replace("STEPS", str(STEPS))
    )
    if kind == "fn":
        body = "function: trialfn:stepper\n" + common
    else:
        with open(os.path.join(d, "prog.py"), "w") as f:
            f.write(PROG)
        body = "program: prog.py\n" + common
    p = os.path.join(d, "s.yaml")
    open(p, "w").write(body)
    return p


def cli(store, d, *args, timeout=180):
    return subprocess.run(
        [PY, "-m", "sweeplab", *args], cwd=d, env=env(store), capture_output=True, text=True, timeout=timeout
    )


def start(store, d, *args, pre=None):
    def pre_fn():
        os.setsid()
        if pre:
            pre()

    return subprocess.Popen(
        [PY, "-m", "sweeplab", *args],
        cwd=d,
        env=env(store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=pre_fn,
    )


def q(store, sql, *a):
    c = sqlite3.connect(f"file:{store}/store.db?mode=ro", uri=True, timeout=10)
    c.row_factory = sqlite3.Row
    try:
        return c.execute(sql, a).fetchall()
    finally:
        c.close()


def completed(store):
    try:
        return {r["number"]: (r["ended"], r["value"]) for r in q(store, "SELECT * FROM trials WHERE state='completed'")}
    except sqlite3.OperationalError:
        return {}


def check(store, d, before, label, problems):
    def bad(msg):
        problems.append(f"{label}: {msg}")
        print("  DEFECT", label, msg, flush=True)

    c = sqlite3.connect(f"{store}/store.db")
    ic = c.execute("PRAGMA integrity_check").fetchone()[0]
    c.close()
    if ic != "ok":
        bad(f"integrity {ic}")
    trials = q(store, "SELECT * FROM trials ORDER BY number")
    nums = [t["number"] for t in trials]
    if nums != list(range(B)):
        bad(f"trial numbers {nums}")
    for t in trials:
        if t["state"] != "completed":
            bad(f"trial {t['number']} state {t['state']} {t['reason']}")
        atts = q(store, "SELECT * FROM attempts WHERE trial_id=? ORDER BY number", t["id"])
        states = [a["state"] for a in atts]
        if states.count("completed") != 1 or "running" in states:
            bad(f"trial {t['number']} attempts {states}")
        if t["attempts"] != len(atts):
            bad(f"trial {t['number']} attempts col {t['attempts']} vs {len(atts)}")
        x = json.loads(t["params"])["x"]
        if t["value"] is None or abs(t["value"] - (float(x) - 0.3) ** 2) > 1e-9:
            bad(f"trial {t['number']} value {t['value']}")
        # resumed from last checkpoint
        if len(atts) > 1 and t["metrics"]:
            prev = q(
                store, "SELECT max(step) m FROM checkpoints WHERE trial_id=? AND attempt<?", t["id"], atts[-1]["number"]
            )[0]["m"]
            rf = json.loads(t["metrics"]).get("resumed_from")
            if prev is not None and rf is not None and rf < prev + 1:
                bad(f"trial {t['number']} last attempt resumed_from {rf}, recorded checkpoint {prev} ({states})")
    after = completed(store)
    for n, v in before.items():
        if after.get(n) != v:
            bad(f"completed trial {n} changed {v} -> {after.get(n)}")
    st = cli(store, d, "status", "s", "--json")
    if st.returncode:
        bad(f"status rc {st.returncode} {st.stderr[-300:]}")
    else:
        js = json.loads(st.stdout)
        if js["sweep"]["state"] != "finished":
            bad(f"sweep state {js['sweep']['state']}")
        if len(js["trials"]) != B:
            bad(f"status lists {len(js['trials'])}")
    b = cli(store, d, "best", "s", "--json")
    if b.returncode:
        bad(f"best rc {b.returncode} {b.stderr[-300:]}")
    else:
        bj = json.loads(b.stdout)
        vals = [t["value"] for t in trials if t["state"] == "completed"]
        bv = bj.get("value") if isinstance(bj, dict) else None
        if bv is None and isinstance(bj, dict):
            bv = (bj.get("best") or {}).get("value")
        if vals and bv is not None and abs(bv - min(vals)) > 1e-12:
            bad(f"best {bv} != min {min(vals)}")
        if bv is None:
            print("  (best json shape:", str(bj)[:200], ")")
    # no stray workers
    for p in psutil.process_iter(["cmdline"]):
        try:
            if (
                "sweeplab.backends.worker" in " ".join(p.info["cmdline"] or ())
                and p.environ().get("SWEEPLAB_STORE") == store
                and p.status() != "zombie"
            ):
                bad(f"stray worker {p.pid}")
        except psutil.Error:
            pass


def has_sweep(store):
    try:
        return bool(os.path.exists(os.path.join(store, "store.db")) and q(store, "SELECT 1 FROM sweeps"))
    except sqlite3.OperationalError:
        return False


def workers_of(proc):
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [
        k for k in kids if "sweeplab.backends.worker" in " ".join(k.cmdline()) or "forkserver" in " ".join(k.cmdline())
    ]


def newest_ckpt(store):
    best = None
    for root, _dirs, files in os.walk(os.path.join(store, "checkpoints")):
        for f in files:
            if f.startswith("payload"):
                p = os.path.join(root, f)
                try:
                    m = os.stat(p).st_mtime_ns
                except OSError:
                    continue
                if best is None or m > best[0]:
                    best = (m, p)
    return best


def mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True).returncode == 0


def one(i, kind, mode, rng, problems):
    d = os.path.join(HERE, "runs", f"{i}-{kind}-{mode}")
    subprocess.run(["umount", d + "/disk"], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    store = os.path.join(d, "store")
    if mode == "ro":
        os.makedirs(d + "/disk")
        assert mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", d + "/disk")
        store = d + "/disk/store"
    hb = "2s" if mode == "stop" else "60s"
    p = spec(kind, d, hb)
    label = f"#{i} {kind} {mode}"
    pre = None
    if mode == "fsize":
        lim = rng.randint(100_000, 2_000_000)

        def pre(lim=lim):
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim))

        label += f" lim={lim}"
    proc = start(store, d, "sweep", p, "--name", "s", "--workers", "2", "-q", pre=pre)
    delay = rng.uniform(0.0, 0.6) if mode == "startup" else rng.uniform(0.3, 4.0)
    if mode in ("ckpt", "complete", "fsize"):
        delay = 0.0
    time.sleep(delay)
    before = completed(store)
    if proc.poll() is not None and mode != "fsize":
        print(label, "ended before fault", proc.returncode)
    elif mode in ("driver9", "startup"):
        os.kill(proc.pid, signal.SIGKILL)
    elif mode == "group9":
        os.killpg(proc.pid, signal.SIGKILL)
    elif mode == "worker9":
        w = workers_of(proc)
        if w:
            rng.choice(w).kill()
        time.sleep(rng.uniform(0.0, 1.0))  # during the retry
        before = completed(store)
        os.kill(proc.pid, signal.SIGKILL)
    elif mode == "fskill":  # kill -9 the fork server (if any), later the driver
        fs_ = [k for k in psutil.Process(proc.pid).children(recursive=True) if "forkserver" in " ".join(k.cmdline())]
        print("  fork servers:", [k.pid for k in fs_])
        for k in fs_:
            k.kill()
        time.sleep(rng.uniform(0.5, 2.0))
        before = completed(store)
        if rng.random() < 0.5:
            os.kill(proc.pid, signal.SIGKILL)
    elif mode == "wterm":
        w = workers_of(proc)
        if w:
            rng.choice(w).terminate()
    elif mode == "ckpt":  # kill as a checkpoint file appears (skip the first k)
        k = rng.randint(1, 25)
        seen = None
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 30:
            n = newest_ckpt(store)
            if n and n != seen:
                seen = n
                k -= 1
                if k <= 0:
                    break
            time.sleep(0.002)
        before = completed(store)
        os.kill(proc.pid, signal.SIGKILL)
    elif mode == "complete":  # kill just as the k-th trial completes
        k = rng.randint(1, B - 1)
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 30:
            if len(completed(store)) >= k:
                break
            time.sleep(0.005)
        before = completed(store)
        os.kill(proc.pid, signal.SIGKILL)
    elif mode == "trunc":  # truncate the newest checkpoint, then kill its worker
        n = newest_ckpt(store)
        if n:
            with open(n[1], "r+b") as f:
                f.truncate(3)
        w = workers_of(proc)
        for x in w:
            x.kill()
        label += f" {n[1] if n else None}"
    elif mode == "term":
        os.kill(proc.pid, signal.SIGTERM)
    elif mode == "termkill":   # kill -9 the driver while it preempts its trials after a SIGTERM
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(rng.uniform(0.0, 0.8))
        before = completed(store)
        os.kill(proc.pid, signal.SIGKILL)
    elif mode in ("rterm", "rkill"):  # kill -9 the sweep, then hit the resuming driver early
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        before = completed(store)
        proc = start(store, d, "resume", "s", "-q")
        time.sleep(rng.uniform(0.2, 1.5))
        os.kill(proc.pid, signal.SIGTERM if mode == "rterm" else signal.SIGKILL)
    elif mode == "allterm":  # as a container's stop: SIGTERM to every process at once
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        os.kill(proc.pid, signal.SIGTERM)
        for k in kids:
            try:
                k.terminate()
            except psutil.Error:
                pass
    elif mode == "stop":
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(3.5)
        os.kill(proc.pid, signal.SIGCONT)
    elif mode == "ro":
        os.kill(proc.pid, signal.SIGKILL)
    try:
        _out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        problems.append(f"{label}: driver hung")
    rc = proc.returncode
    if mode == "ro":
        time.sleep(1.0)
        ok = mount("-o", "remount,ro", d + "/disk")
        if not ok:
            print("  ro: remount failed")
        else:
            for args in (("status", "s", "--json"), ("best", "s", "--json"), ("status",), ("export", "s")):
                r0 = cli(store, d, *args)
                if r0.returncode not in (0, 1) or "Traceback" in r0.stderr:
                    problems.append(f"{label}: ro {args} rc {r0.returncode} {r0.stderr[-300:]}")
                print(f"  ro {args[0]} rc {r0.returncode} {r0.stderr.strip()[-200:]!r}")
            r0 = cli(store, d, "resume", "s", "-q")
            print(f"  ro resume rc {r0.returncode} {r0.stderr.strip()[-300:]!r}")
            if r0.returncode == 0 or "Traceback" in r0.stderr:
                problems.append(f"{label}: ro resume rc {r0.returncode} {r0.stderr[-300:]}")
            assert mount("-o", "remount,rw", d + "/disk")
    if mode == "fsize":
        print(f"  fsize rc {rc} stderr: {err.strip()[-300:]!r}")
        if rc not in (0, 1) or "Traceback" in err:
            problems.append(f"{label}: fsize rc {rc} {err[-500:]}")
    # a SIGTERM before the sweep exists ends the command (143, nothing created); after, it is the driver's stop
    if mode in ("term", "allterm") and rc != 0 and has_sweep(store):
        problems.append(f"{label}: SIGTERM at {delay:.2f}s exit {rc} {err[-400:]}")
        print("  DEFECT", label, "term rc", rc, err[-300:])
    if mode in ("stop", "wterm", "trunc") and rc != 0:
        problems.append(f"{label}: exit {rc} {err[-300:]}")
    if mode in ("term", "allterm", "rterm") and rc == 0:
        pre_ = q(store, "SELECT state FROM trials")
        if any(r["state"] not in ("completed", "preempted", "queued") for r in pre_):
            problems.append(f"{label}: after SIGTERM states {[r['state'] for r in pre_]}")
    time.sleep(0.3)
    if not has_sweep(store):
        print(f"{label} at {delay:.2f}s: no sweep created (rc {rc}) {err[-200:]!r}")
        return
    c = sqlite3.connect(f"{store}/store.db")
    ic = c.execute("PRAGMA integrity_check").fetchone()[0]
    c.close()
    if ic != "ok":
        problems.append(f"{label}: integrity before resume {ic}")
    r = cli(store, d, "resume", "s", "-q")
    if r.returncode != 0:
        problems.append(f"{label}: resume rc {r.returncode} {r.stderr[-400:]}")
        print("  DEFECT", label, "resume", r.returncode, r.stderr[-300:])
    check(store, d, before, f"{label} at {delay:.2f}s rc {rc}", problems)
    if mode == "trunc":
        ev = q(store, "SELECT count(*) n FROM events WHERE kind='checkpoint_corrupt'")[0]["n"]
        print("  checkpoint_corrupt events:", ev)
    print(label, f"at {delay:.2f}s rc {rc} ok-checked", flush=True)
    if mode == "ro":
        subprocess.run(["umount", d + "/disk"], capture_output=True)


if __name__ == "__main__":
    seed = int(sys.argv[1])
    n = int(sys.argv[2])
    modes = sys.argv[3].split(",")
    HERE = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else tempfile.mkdtemp(prefix="sweeplab-chaos-")
    os.makedirs(HERE, exist_ok=True)
    with open(os.path.join(HERE, "trialfn.py"), "w") as f:
        f.write(TRIALFN)
    print("work directory:", HERE)
    rng = random.Random(seed)
    problems = []
    for i in range(n):
        kind = ["fn", "cmd"][i % 2]
        mode = modes[(i // 2) % len(modes)]
        try:
            one(seed * 1000 + i, kind, mode, rng, problems)
        except Exception as e:
            problems.append(f"#{i} {kind} {mode}: harness {e!r}")
            print("harness error", e)
    print("PROBLEMS:")
    print("\n".join(problems))
