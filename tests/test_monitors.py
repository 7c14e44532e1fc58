"""Training-health monitors: every rule firing and not firing, fire-once / warn-after-recovery, spec parsing
with key paths, Python constructors, and rebuild determinism."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from sweeplab import monitors as sm
from sweeplab._clock import FakeClock
from sweeplab.errors import SpecError
from sweeplab.monitors import Monitor, parse_duration, parse_monitors
from sweeplab.types import Decision, Goal, MetricPoint, Verdict

NAN, INF = math.nan, math.inf


def pts(*rows: tuple[int, str, float]) -> list[MetricPoint]:
    return [MetricPoint(step, key, float(value), 1000.0 + step) for step, key, value in rows]


def series(key: str, values: Sequence[float], start: int = 0) -> list[MetricPoint]:
    return pts(*[(start + i, key, v) for i, v in enumerate(values)])


def fire_at(monitor: Monitor, points: Sequence[MetricPoint], trial: int = 0) -> list[int]:
    """Indices of the points (fed one per observe call) at which the monitor fired."""
    return [i for i, p in enumerate(points) if monitor.observe(trial, [p]).decision is not Decision.CONTINUE]


# one row per firing / not firing: (monitor, points, indices where it fires, substring of the first reason)
CASES: list[tuple[str, Monitor, list[MetricPoint], list[int], str]] = [
    ("nan-fires", sm.nan(), pts((0, "loss", 1), (1, "acc", 0.5), (2, "loss", NAN)), [2],
     "nan: loss is NaN at step 2"),
    ("nan-inf", sm.nan(), pts((0, "loss", 1), (1, "loss", -INF)), [1], "loss is -inf at step 1"),
    ("nan-quiet", sm.nan(), series("loss", [3, 2, 1, 1e30]), [], ""),
    ("nan-named-only", sm.nan(["val_loss"]), pts((0, "loss", NAN), (0, "val_loss", 1), (1, "val_loss", INF)),
     [2], "val_loss is inf at step 1"),
    ("nan-stop-fires-once", sm.nan(), series("loss", [NAN, NAN, 1, NAN]), [0], "loss is NaN at step 0"),
    ("nan-warn-again-after-recovery", sm.nan(action="warn"), series("loss", [NAN, NAN, 1, NAN]), [0, 3],
     "loss is NaN"),
    ("diverging-min", sm.diverging("loss", factor=10), series("loss", [1, 0.5, 4, 6]), [3],
     "loss 6 at step 3 is worse than 10 x its best 0.5"),
    ("diverging-min-quiet", sm.diverging("loss", factor=10), series("loss", [1, 0.5, 4, 5]), [], ""),
    ("diverging-max", sm.diverging("acc", factor=10, goal="maximize"), series("acc", [0.5, 0.9, 0.1, 0.08]),
     [3], "acc 0.08 at step 3 is worse than 10 x its best 0.9"),
    ("diverging-negative-min", sm.diverging("nll", factor=2), series("nll", [-4, -2.5, -1.9]), [2], "-1.9"),
    ("diverging-min-steps", sm.diverging("loss", factor=2, min_steps=3), series("loss", [1, 5, 5, 5]), [3],
     "at step 3"),
    # a ratio to a best near 0 or across 0 is noise: the value must also be worse than the first one
    ("diverging-best-near-zero-noise", sm.diverging("loss"), series("loss", [2.3, 0.5, 0.01, 0.2, 1.5]), [],
     ""),
    ("diverging-best-near-zero-then-diverges", sm.diverging("loss"), series("loss", [2.3, 0.01, 0.4, 25]), [3],
     "worse than 10 x its best 0.01 and than its first value 2.3"),
    ("diverging-across-zero", sm.diverging("nll", factor=2), series("nll", [3, 0.5, -0.2, 0.4, 2]), [], ""),
    ("diverging-ignores-nan", sm.diverging("loss", factor=2), series("loss", [1, NAN, 1.5]), [], ""),
    ("plateau", sm.plateau("val_loss", patience=3), series("val_loss", [1, 0.9, 0.9, 0.95, 0.9, 0.5]), [4],
     "val_loss did not improve by more than 0 for 3 reports (best 0.9 at step 1"),
    ("plateau-improving", sm.plateau("val_loss", patience=2), series("val_loss", [1, 0.9, 0.8, 0.7]), [], ""),
    ("plateau-min-delta", sm.plateau("loss", patience=3, min_delta=0.05), series("loss", [1, .99, .98, .97]),
     [3], "by more than 0.05"),
    ("plateau-max", sm.plateau("acc", patience=2, goal="maximize"), series("acc", [0.5, 0.6, 0.6, 0.55]),
     [3], "best 0.6"),
    ("plateau-nan-counts-as-no-gain", sm.plateau("loss", patience=2), series("loss", [1, NAN, NAN]), [2], ""),
    ("plateau-warn-twice", sm.plateau("loss", patience=2, action="warn"),
     series("loss", [1, 1, 1, 1, 0.5, 0.5, 0.5]), [2, 6], "for 2 reports"),
    ("exploding-threshold", sm.exploding(threshold=100), series("grad_norm", [1, 2, 150, 1]), [2],
     "grad_norm 150 at step 2 is above the threshold 100"),
    ("exploding-factor", sm.exploding(factor=10), series("grad_norm", [1, 1.2, 0.9, 11]), [3],
     "above 10 x its running median 1"),
    ("exploding-factor-quiet", sm.exploding(factor=10), series("grad_norm", [1, 1.2, 0.9, 9]), [], ""),
    ("exploding-default-factor", sm.exploding(), series("grad_norm", [2, 2, 30]), [2], "10 x"),
    # a non-finite norm is a step a GradScaler skips, not an explosion: `nan` on the loss catches a broken run
    ("exploding-skips-non-finite", sm.exploding("gn", factor=10), series("gn", [1, INF, NAN, 1.2, 1, 11]), [5],
     "gn 11 at step 5 is above 10 x its running median 1"),
    ("exploding-first-value-no-reference", sm.exploding(factor=2), series("grad_norm", [1e6]), [], ""),
    ("vanishing", sm.vanishing(threshold=1e-6, patience=3), series("grad_norm", [1e-3, 1e-8, 1e-9, 1e-8]),
     [3], "below 1e-06 for 3 reports"),
    ("vanishing-interrupted", sm.vanishing(threshold=1e-6, patience=3),
     series("grad_norm", [1e-8, 1e-8, 1e-2, 1e-8, 1e-8]), [], ""),
    ("overfitting", sm.overfitting("train_loss", "val_loss", patience=3),
     [p for i, (t, v) in enumerate([(1, 1), (.8, 1.0), (.6, 1.1), (.5, 1.2), (.4, 1.3)])
      for p in pts((i, "train_loss", t), (i, "val_loss", v))], [7],
     "the gap between val_loss and train_loss grew for 3 reports in a row, to 0.7 at step 3"),
    ("overfitting-gap-shrinks", sm.overfitting("train_loss", "val_loss", patience=2),
     [p for i, (t, v) in enumerate([(1, 1.5), (.8, 1.2), (.6, 0.9), (.5, 0.7)])
      for p in pts((i, "val_loss", v), (i, "train_loss", t))], [], ""),
    ("overfitting-max", sm.overfitting("train_acc", "val_acc", patience=2, goal="maximize"),
     [p for i, (t, v) in enumerate([(.5, .5), (.7, .55), (.9, .55), (.95, .54)])
      for p in pts((i, "train_acc", t), (i, "val_acc", v))], [7], "grew for 2 reports"),
    # the gap grows through every healthy run: while val keeps reaching new bests it is not overfitting
    ("overfitting-val-still-improving", sm.overfitting("train_loss", "val_loss", patience=2),
     [p for i, (t, v) in enumerate([(2, 2.1), (1, 1.5), (.5, 1.2), (.2, 1.1), (.1, 1.05)])
      for p in pts((i, "train_loss", t), (i, "val_loss", v))], [], ""),
    ("overfitting-max-val-still-improving", sm.overfitting("train_acc", "val_acc", patience=2, goal="maximize"),
     [p for i, (t, v) in enumerate([(.5, .5), (.7, .55), (.9, .56)])
      for p in pts((i, "train_acc", t), (i, "val_acc", v))], [], ""),
    ("custom-true", sm.custom(lambda trial, p: p[-1].value > 3, name="too_big"), series("x", [1, 5]), [1],
     "too_big: fired at step 1"),
    ("custom-str", sm.custom(lambda trial, p: "x above 3" if p[-1].value > 3 else None), series("x", [1, 5]),
     [1], "custom: x above 3"),
    ("custom-verdict", sm.custom(lambda trial, p: Verdict(Decision.STOP, "odd") if p[-1].step % 2 else None),
     series("x", [1, 5]), [1], "odd"),
    ("custom-quiet", sm.custom(lambda trial, p: False), series("x", [1, 5]), [], ""),
]


@pytest.mark.parametrize(("monitor", "points", "fires", "reason"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_monitor_fires_exactly_when_expected(monitor: Monitor, points: list[MetricPoint], fires: list[int],
                                             reason: str) -> None:
    verdicts = [monitor.observe(0, [p]) for p in points]
    assert [i for i, v in enumerate(verdicts) if v.decision is not Decision.CONTINUE] == fires
    for i in fires:
        v = verdicts[i]
        assert v.decision is (Decision.STOP if monitor.action == "stop" else Decision.WARN)
        assert v.rule == monitor.name and v.reason.startswith(f"{monitor.name}: ")
        assert v.data["action"] == monitor.action and "step" in v.data
        json.dumps(dict(v.data), allow_nan=False)        # event data is strict JSON, even for NaN values
    if fires:
        assert reason in verdicts[fires[0]].reason


def test_a_batch_returns_its_first_firing_and_trials_are_independent() -> None:
    m = sm.nan()
    batch = pts((0, "loss", 1), (1, "loss", NAN), (2, "acc", INF))
    v = m.observe(0, batch)
    assert v.stops and v.data["metric"] == "loss" and v.data["value"] == "NaN"
    assert m.observe(1, batch).stops                      # another trial: its own state
    assert not m.observe(0, batch).stops                  # stop fires once per trial


def test_stalled_uses_the_time_it_is_given() -> None:
    clock = FakeClock()
    m = sm.stalled("10m")
    assert m.idle(0, None, clock.time()).decision is Decision.CONTINUE     # no report yet: the clock waits
    last = clock.time()
    m.heard(0, pts((0, "loss", 1)), last, first=True)
    clock.advance(599)
    assert m.idle(0, last, clock.time()).decision is Decision.CONTINUE
    clock.advance(1)
    v = m.idle(0, last, clock.time())
    assert v.stops and v.reason == "stalled: no report for 10m (limit 10m)" and v.data["seconds"] == 600
    clock.advance(60)
    assert not m.idle(0, last, clock.time()).stops       # once per trial
    assert m.idle(0, None, clock.time()).decision is Decision.CONTINUE
    assert m.metrics() == frozenset()


def test_stalled_warn_fires_again_only_after_progress() -> None:
    clock = FakeClock()
    m = sm.stalled(30, action="warn")
    last = clock.time()
    m.heard(0, pts((0, "loss", 1)), last, first=True)
    clock.advance(31)
    assert m.idle(0, last, clock.time()).decision is Decision.WARN
    clock.advance(31)
    assert m.idle(0, last, clock.time()).decision is Decision.CONTINUE
    last = clock.time()
    m.heard(0, pts((1, "loss", 1)), last)
    assert m.idle(0, last, clock.time()).decision is Decision.CONTINUE     # progress clears the condition
    clock.advance(31)
    assert m.idle(0, last, clock.time()).decision is Decision.WARN


# (points of one report, whether it is progress after a first report of loss 1.0 at step 3 and hb 0 at step 3)
PROGRESS = [
    (((4, "loss", 1.0),), True),            # the step of a watched metric advanced
    (((3, "loss", 0.5),), True),            # its value changed (a trial that logs at one step)
    (((2, "loss", 0.5),), True),            # a retried step with a new value
    (((3, "loss", 1.0),), False),           # the same report again
    (((2, "loss", 1.0),), False),           # an old step, the same value
    (((9, "heartbeat", 7.0),), False),      # a metric it does not watch, whatever its step and value
    (((9, "lr", 0.01), (9, "hb", 2.0)), False),
    (((4, "val_acc", 0.9),), True),         # the sweep's metric
    (((4, "train/loss_cls", 0.9),), True),  # a loss-like name
]


@pytest.mark.parametrize(("report", "progress"), PROGRESS, ids=[
    "step", "value", "old-step-new-value", "repeat", "old-step", "heartbeat", "constants", "sweep-metric",
    "loss-like"])
def test_stalled_counts_as_progress_only_a_watched_metric_that_advanced(report, progress) -> None:
    """A trial whose loop hangs while a thread logs a heartbeat (or a constant, with run.log's automatic
    step) made no progress: `stalled` stops it, where any report used to reset its clock."""
    clock = FakeClock()
    (m,) = sm.parse_monitors([{"stalled": {"after": 30}}], metric="val_acc")
    m.heard(0, pts((3, "loss", 1.0), (3, "hb", 0.0)), clock.time(), first=True)
    clock.advance(20)
    m.heard(0, pts(*report), clock.time())
    clock.advance(20)
    v = m.idle(0, clock.time() - 20, clock.time())
    assert v.stops is not progress
    if not progress:
        assert v.reason == ("stalled: no progress for 40s (limit 30s): its reports since then advanced no step or "
                            "value of val_acc or a loss-like metric"), v.reason


def test_stalled_metrics_option_and_a_new_attempt() -> None:
    clock = FakeClock()
    m = sm.stalled(30, metrics=["step_loss"])
    assert m.metrics() == frozenset({"step_loss"})            # named: a typo is reported by the driver
    m.heard(0, pts((0, "step_loss", 1.0)), clock.time(), first=True)
    clock.advance(20)
    m.heard(0, pts((1, "loss", 0.5)), clock.time())            # not watched: `metrics` replaces the default
    clock.advance(20)
    w = sm.stalled(30, metrics=["step_loss"], action="warn")
    w.heard(0, pts((0, "step_loss", 1.0)), clock.time() - 40, first=True)
    w.heard(0, pts((1, "loss", 0.5)), clock.time() - 20)
    assert w.idle(0, clock.time() - 20, clock.time()).decision is Decision.WARN
    w.heard(0, pts((0, "step_loss", 1.0)), clock.time(), first=True)   # a new attempt starts the clock again
    clock.advance(20)
    assert w.idle(0, clock.time() - 20, clock.time()).decision is Decision.CONTINUE
    every = sm.stalled(30, metrics="all")
    every.heard(0, pts((0, "hb", 1.0)), clock.time(), first=True)
    clock.advance(20)
    every.heard(0, pts((1, "hb", 1.0)), clock.time())
    clock.advance(20)
    assert every.idle(0, clock.time(), clock.time()).decision is Decision.CONTINUE   # all: a new step counts
    # a sweep without a metric watches every metric
    (bare,) = sm.parse_monitors([{"stalled": {"after": 30}}])
    assert bare.watches("anything") and not m.watches("loss")


def test_custom_rule_that_raises_warns_once_instead_of_ending_the_sweep() -> None:
    def broken(trial: int, points: Sequence[MetricPoint]) -> bool:
        raise ZeroDivisionError("oops")

    m = sm.custom(broken)
    v = m.observe(0, pts((0, "x", 1)))
    assert v.decision is Decision.WARN and "broken: the rule raised ZeroDivisionError: oops" == v.reason
    assert m.observe(0, pts((1, "x", 1))).decision is Decision.CONTINUE


def test_custom_warn_turns_a_stop_verdict_into_a_warning() -> None:
    m = sm.custom(lambda t, p: Verdict(Decision.STOP, "bad"), name="mine", action="warn")
    assert m.observe(0, pts((0, "x", 1))).decision is Decision.WARN


@pytest.mark.parametrize(
    ("monitor", "names"),
    [(sm.nan(), None), (sm.nan(["a", "b"]), {"a", "b"}), (sm.plateau("val_loss"), {"val_loss"}),
     (sm.exploding(), {"grad_norm"}), (sm.overfitting("tr", "va"), {"tr", "va"}),
     (sm.custom(lambda t, p: None), None)],
    ids=["nan-any", "nan-named", "plateau", "exploding", "overfitting", "custom"],
)
def test_metrics_names_what_the_monitor_needs(monitor: Monitor, names: set[str] | None) -> None:
    assert monitor.metrics() == (None if names is None else frozenset(names))


# which metrics `nan` watches ---------------------------------------------------------------------------


def test_nan_by_default_ignores_an_inf_in_a_metric_the_sweep_does_not_judge() -> None:
    """An AMP step the GradScaler skips logs grad_norm = inf, a warm-up from lr 0 an lr_ratio of inf, an
    early perplexity exp(loss) overflows: healthy runs all. By default `nan` watches the sweep's metrics
    and the loss-like ones, as Keras' TerminateOnNaN watches the loss and Lightning the monitored metric."""
    m = sm.nan()
    points = pts((0, "grad_norm", INF), (0, "lr_ratio", INF), (0, "val_ppl", INF), (0, "grad_norm", NAN),
                 (1, "loss", 0.5), (2, "loss", NAN))
    assert fire_at(m, points) == [5]


@pytest.mark.parametrize("key", ["loss", "val_loss", "train/loss", "loss_cls", "valLoss", "Loss/val"])
def test_nan_by_default_watches_every_loss_like_metric(key: str) -> None:
    assert fire_at(sm.nan(), pts((0, key, 1.0), (1, key, INF))) == [1]


def test_nan_by_default_watches_the_sweeps_metrics_in_spec_and_python_forms() -> None:
    """parse_monitors binds the sweep's metrics (every objective, the scheduler's, the constraints') to a
    `nan` that names none, whether it came from the spec or from Python."""
    for m in parse_monitors(["nan", sm.nan()], metric="acc", watch=("acc", "f1", "memory_gb")):
        assert m.metrics() is None
        for key in ("acc", "f1", "memory_gb"):
            assert m.observe(0, pts((3, key, NAN))).stops, key
            m.forget(0)
        assert not m.observe(0, pts((4, "grad_norm", INF))).stops


def test_nan_with_metrics_all_watches_every_metric_and_a_list_only_those() -> None:
    (every,) = parse_monitors([{"nan": {"metrics": "all"}}], metric="acc")
    assert fire_at(every, pts((0, "grad_norm", 1.0), (1, "grad_norm", INF))) == [1]
    assert fire_at(sm.nan(metrics="all"), pts((0, "lr_ratio", INF))) == [0]
    (listed,) = parse_monitors([{"nan": {"metrics": ["grad_norm"]}}], metric="acc")
    assert fire_at(listed, pts((0, "acc", NAN), (1, "grad_norm", INF))) == [1]


# spec parsing -----------------------------------------------------------------------------------------


def test_spec_forms_build_the_same_monitors_as_python() -> None:
    built = parse_monitors(
        ["nan", {"plateau": {"metric": "val_loss", "patience": 5}}, {"exploding": {"metric": "grad_norm",
                                                                                   "factor": 10}},
         {"stalled": {"after": "10m", "action": "warn"}}, {"vanishing": None}, sm.nan(["x"])]
    )
    assert [type(m) for m in built[:5]] == [type(sm.nan()), type(sm.plateau("v")), type(sm.exploding()),
                                             type(sm.stalled(1)), type(sm.vanishing())]
    assert built[1].metric == "val_loss" and built[1].patience == 5        # type: ignore[attr-defined]
    assert built[2].factor == 10 and built[2].threshold is None            # type: ignore[attr-defined]
    assert built[3].after == 600 and built[3].action == "warn"             # type: ignore[attr-defined]
    assert built[5].metrics() == frozenset({"x"})
    assert parse_monitors(None) == []


def test_diverging_and_plateau_default_to_the_sweep_metric_and_goal() -> None:
    plateau, diverging = parse_monitors(["plateau", {"diverging": {"factor": 3}}], metric="acc",
                                        goal=Goal.MAXIMIZE)
    assert plateau.metric == "acc" and plateau.goal is Goal.MAXIMIZE          # type: ignore[attr-defined]
    assert diverging.metric == "acc" and diverging.goal is Goal.MAXIMIZE      # type: ignore[attr-defined]
    (other,) = parse_monitors([{"plateau": {"metric": "loss"}}], metric="acc", goal="maximize")
    assert other.goal is Goal.MINIMIZE                                         # type: ignore[attr-defined]


BAD: list[tuple[Any, str, str]] = [
    ("nan", "monitors", "must be a list"),
    (["nann"], "monitors[0]", "did you mean 'nan'"),
    (["explode"], "monitors[0]", "unknown monitor"),
    ([42], "monitors[0]", "a name or a one-key mapping"),
    ([{"nan": {}, "plateau": {}}], "monitors[0]", "a name or a one-key mapping"),
    ([{"plateau": 5}], "monitors[0].plateau", "options must be a mapping"),
    (["nan", {"plateau": {"metric": "x", "patiense": 3}}], "monitors[1].plateau.patiense",
     "did you mean 'patience'"),
    ([{"plateau": {"metric": "val_loss", "patience": 0}}], "monitors[0].plateau.patience", "integer >= 1"),
    ([{"plateau": {"metric": "val_loss", "patience": 2.5}}], "monitors[0].plateau.patience", "not an integer"),
    ([{"plateau": {"metric": "val_loss", "min_delta": -1}}], "monitors[0].plateau.min_delta", ">= 0"),
    ([{"plateau": {}}], "monitors[0].plateau.metric", "needs metric"),
    ([{"plateau": {"metric": 3}}], "monitors[0].plateau.metric", "not a metric name"),
    ([{"exploding": {"factor": 1}}], "monitors[0].exploding.factor", "must exceed 1"),
    ([{"exploding": {"threshold": "high"}}], "monitors[0].exploding.threshold", "not a number"),
    ([{"vanishing": {"threshold": -1}}], "monitors[0].vanishing.threshold", "a number > 0"),
    ([{"diverging": {"metric": "loss", "factor": 0.5}}], "monitors[0].diverging.factor", "must exceed 1"),
    ([{"diverging": {"metric": "loss", "goal": "up"}}], "monitors[0].diverging.goal", "minimize or maximize"),
    ([{"overfitting": {"train": "a"}}], "monitors[0].overfitting.val", "needs val"),
    ([{"stalled": {"after": "10 parsecs"}}], "monitors[0].stalled.after", "unknown duration unit 'parsecs'"),
    ([{"stalled": {}}], "monitors[0].stalled.after", "needs after"),
    ([{"nan": {"action": "kill"}}], "monitors[0].nan.action", "stop or warn"),
    ([{"nan": {"metrics": [1]}}], "monitors[0].nan.metrics", "list of metric names"),
]


@pytest.mark.parametrize(("raw", "key", "text"), BAD, ids=[f"{k}: {t}" for _, k, t in BAD])
def test_bad_input_names_key_value_and_fix(raw: Any, key: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_monitors(raw, file="sweep.yaml")
    assert info.value.key == key
    assert str(info.value).startswith(f"sweep.yaml: {key}: ")
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("call", "key"),
    [(lambda: sm.plateau("x", patience=0), "plateau.patience"), (lambda: sm.exploding(factor=1),
                                                                 "exploding.factor"),
     (lambda: sm.nan(action="explode"), "nan.action"), (lambda: sm.stalled("soon"), "stalled.after"),
     (lambda: sm.custom("not callable"), "custom")],  # type: ignore[arg-type]
    ids=["plateau", "exploding", "nan-action", "stalled", "custom"],
)
def test_python_constructors_validate_like_the_spec(call: Any, key: str) -> None:
    with pytest.raises(SpecError) as info:
        call()
    assert info.value.key == key


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("1h30m", 5400), ("2d", 172800), ("1.5h", 5400), ("250ms", 0.25),
     (45, 45), (0.5, 0.5), ("90", 90), (" 5 m ", 300)],
    ids=lambda x: str(x),
)
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10 parsecs", "m", "-5s", 0, -1, True, "5x", None, math.inf],
                         ids=lambda x: repr(x))
def test_parse_duration_refuses(text: Any) -> None:
    with pytest.raises(SpecError):
        parse_duration(text)


# rebuild determinism ------------------------------------------------------------------------------------


def _random_stream(seed: int) -> list[tuple[int, list[MetricPoint]]]:
    rng = random.Random(seed)
    out = []
    for step in range(60):
        for trial in range(4):
            rows = []
            for key in ("loss", "val_loss", "train_loss", "grad_norm"):
                v = rng.choice([rng.uniform(0, 2), rng.uniform(0, 2), rng.uniform(0, 50), 1e-9, NAN, INF])
                rows.append((step, key, v))
            out.append((trial, pts(*rows)))
    return out


def _all() -> list[Monitor]:
    return parse_monitors(
        ["nan", {"diverging": {"metric": "loss", "factor": 3, "action": "warn"}},
         {"plateau": {"metric": "val_loss", "patience": 3, "action": "warn"}}, {"exploding": {"factor": 5}},
         {"vanishing": {"threshold": 1e-6, "patience": 2, "action": "warn"}},
         {"overfitting": {"train": "train_loss", "val": "val_loss", "patience": 2}}]
    )


def test_feeding_the_same_points_to_fresh_monitors_gives_the_same_verdicts() -> None:
    def run() -> list[tuple[str, str]]:
        monitors = _all()
        return [(v.decision.value, v.reason) for trial, batch in _random_stream(3) for m in monitors
                for v in [m.observe(trial, batch)]]

    first = run()
    assert first == run()
    assert {d for d, _ in first} == {"continue", "stop", "warn"}   # the stream exercises every outcome


def test_rules_without_a_goal_take_the_goal_of_the_objective_they_watch() -> None:
    """`overfitting` on the sweep's maximized metric, and any rule on a maximized objective other than the
    first, were judged as minimized (an accuracy falling from its best counted as improving); a rule built
    in Python without `goal` took minimize even on the sweep's own maximized metric."""
    goals = {"size": Goal.MINIMIZE, "val_acc": Goal.MAXIMIZE}
    spec_rules = parse_monitors([{"overfitting": {"train": "train_acc", "val": "val_acc"}},
                                 {"plateau": {"metric": "val_acc"}}, {"plateau": {"metric": "other"}},
                                 {"diverging": {"metric": "val_acc", "goal": "minimize"}}],
                                metric="size", goal=Goal.MINIMIZE, goals=goals)
    assert [m.goal for m in spec_rules] == [Goal.MAXIMIZE, Goal.MAXIMIZE, Goal.MINIMIZE, Goal.MINIMIZE]
    python_rules = parse_monitors([sm.overfitting("train_acc", "val_acc"), sm.plateau("val_acc"),
                                   sm.diverging("val_acc", goal="minimize"), sm.plateau("loss")],
                                  metric="val_acc", goal="maximize")
    assert [m.goal for m in python_rules] == [Goal.MAXIMIZE, Goal.MAXIMIZE, Goal.MINIMIZE, Goal.MINIMIZE]
    # the same object in a sweep that minimizes val_acc follows that sweep
    assert parse_monitors([python_rules[1]], metric="val_acc", goal="minimize")[0].goal is Goal.MINIMIZE


def test_a_rule_made_in_python_is_stored_as_the_spec_entry_that_rebuilds_it() -> None:
    rules = [sm.nan(), sm.nan("all"), sm.nan(["loss", "acc"], action="warn"),
             sm.diverging("loss", factor=5, min_steps=2), sm.plateau("acc", patience=4, min_delta=0.1, goal="maximize"),
             sm.exploding(threshold=50.0), sm.exploding("g", factor=3), sm.vanishing(patience=2),
             sm.overfitting("tr", "va", patience=2, goal="maximize"), sm.stalled("10m", metrics=["loss"])]
    for rule in rules:
        entry = rule.to_spec()
        json.dumps(entry)
        (rebuilt,) = parse_monitors([entry])
        assert type(rebuilt) is type(rule) and rebuilt.to_spec() == entry, (rule, entry, rebuilt.to_spec())
    with pytest.raises(SpecError, match="custom 'spike'"):
        parse_monitors([sm.custom(lambda t, p: None, name="spike").to_spec()])


@pytest.mark.parametrize(("monitor", "first", "second"), [
    (sm.plateau("val_loss", patience=3), [1.0, 0.5, 0.33, 0.25, 0.2, 0.17], [1.0, 0.5, 0.33, 0.25, 0.2]),
    (sm.diverging("val_loss", factor=10), [2.3, 0.5, 0.05], [2.3, 2.5, 0.9, 0.1]),
    (sm.exploding("val_loss", factor=10), [50, 20, 10, 5, 3, 2, 1, 1, 1, 1], [50, 20, 10]),
], ids=["plateau", "diverging", "exploding"])
def test_a_curve_that_starts_over_is_judged_on_its_own(monitor: Monitor, first: list[float],
                                                      second: list[float]) -> None:
    """A retry that starts over (from scratch, or from an earlier checkpoint) reports steps it reported
    before: its healthy, falling loss was judged against the first attempt's best, and `plateau` (3 reports
    not below 0.17), `diverging` (2.5 > 10 x 0.05) or `exploding` (a gradient norm of 50 at the start of
    training, above 10 x the first attempt's running median) stopped it."""
    def curve(values: list[float]) -> list[MetricPoint]:
        return series("val_loss", values)

    assert fire_at(monitor, curve(first)) == []
    assert fire_at(monitor, curve(second)) == []
    # the same values at steps going on (no restart) do fire
    fresh = type(monitor)(**monitor._options())
    rows = curve(first) + [MetricPoint(p.step + len(first), p.key, p.value, p.time) for p in curve(second)]
    assert fire_at(fresh, rows) != []


def test_a_flat_curve_that_starts_over_goes_on_counting_its_plateau() -> None:
    """The count of reports without progress survives the restart (a flat trial retried stops where it would
    have): 2 stale reports before it, 2 after."""
    m = sm.plateau("val_loss", patience=4)
    assert fire_at(m, series("val_loss", [1, 1, 1])) == []
    assert fire_at(m, series("val_loss", [1, 1, 1])) == [1]
