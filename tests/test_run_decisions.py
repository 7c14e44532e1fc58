"""`Run` at a scheduler's decision steps: the report goes out at once and the trial waits for the verdict."""

from __future__ import annotations

import threading

from sweeplab.run import Run
from sweeplab.types import MetricPoint


def _run(sent: list, steps=(1, 3)) -> Run:
    return Run(config={}, sink=lambda kind, data: sent.append((kind, data)), decision_steps=steps,
               decision_metric="loss")


def test_a_report_at_a_decision_step_waits_for_go_and_others_do_not():
    sent: list = []
    run = _run(sent)
    released = threading.Event()

    def driver() -> None:                      # answers once it has seen the step-1 batch
        while not any(d.get("decide") == 1 for _, d in sent):
            threading.Event().wait(0.001)
        released.set()
        run.go(1)

    t = threading.Thread(target=driver)
    t.start()
    run.log({"loss": 1.0}, step=1)
    assert released.is_set()                   # log returned only after the verdict
    t.join()
    assert sent[-1] == ("metrics", {"points": [MetricPoint(1, "loss", 1.0, sent[-1][1]["points"][0][3])], "decide": 1})

    run.log({"loss": 0.9}, step=2)             # not a decision step: buffered, no wait
    run.log({"acc": 0.5}, step=3)              # a decision step without the judged metric: no wait
    assert not any(d.get("decide") in (2, 3) for _, d in sent)
    assert not run.should_stop


def test_a_stop_wakes_a_trial_waiting_at_a_decision_step():
    sent: list = []
    run = _run(sent)
    threading.Timer(0.05, run.request_stop, args=("pruned",)).start()
    run.log({"loss": 2.0}, step=3)
    assert run.should_stop and run.stop_reason == "pruned"
    assert sent[-1][1]["decide"] == 3


def test_without_decision_steps_a_report_never_waits():
    sent: list = []
    run = Run(config={}, sink=lambda kind, data: sent.append((kind, data)))
    run.log({"loss": 1.0}, step=1)
    run.flush()
    assert sent == [("metrics", {"points": sent[0][1]["points"]})]   # no "decide" key


def test_other_ranks_never_wait(monkeypatch):
    # a rank that waited would hang for the whole bound (made an hour here), far past the join below
    monkeypatch.setattr("sweeplab.run._DECISION_WAIT", 3600.0)
    sent: list = []
    run = Run(config={}, sink=lambda kind, data: sent.append((kind, data)), decision_steps=(1,),
              decision_metric="loss", rank=1)
    t = threading.Thread(target=run.log, args=({"loss": 1.0},), kwargs={"step": 1}, daemon=True)
    t.start()
    t.join(timeout=30)                        # returns at once: only rank 0 reports and waits
    waited = t.is_alive()
    run.request_stop("test over")             # releases a rank that did wait
    assert not waited, "rank 1 waited for a verdict at a decision step"
    assert sent == []                         # and it sent nothing: rank 0 reports for the trial


def test_the_decision_marker_goes_out_when_the_heartbeat_flushed_the_rung_report_first():
    """The worker's heartbeat thread flushes stale points (`flush_if_stale`) between `log` buffering the
    rung's report and sending it with its decision marker. The marker went with nothing (an empty buffer
    sent nothing), so the driver never knew the trial waited: it waited out `_DECISION_WAIT` (10 s) at the
    rung. The marker now goes out alone, and the driver answers it."""
    sent: list = []
    run = _run(sent)
    original = run._await_decision

    def heartbeat_first(step: int) -> None:
        run.flush()                     # the heartbeat's flush wins the race for the buffered report
        original(step)

    run._await_decision = heartbeat_first   # type: ignore[method-assign]
    answered = threading.Event()

    def driver() -> None:
        while not any(d.get("decide") == 1 for _, d in sent):
            threading.Event().wait(0.001)
        answered.set()
        run.go(1)

    t = threading.Thread(target=driver, daemon=True)
    t.start()
    run.log({"loss": 1.0}, step=1)
    t.join(timeout=5)
    assert answered.is_set()            # the marker went out (it never did: log waited 10 s, then went on)
    assert [d.get("decide") for _, d in sent] == [None, 1] and sent[1][1]["points"] == []
