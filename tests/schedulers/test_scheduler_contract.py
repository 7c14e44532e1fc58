"""Every scheduler passes the shared contract suite (sweeplab.testing.schedulers)."""

from __future__ import annotations

from sweeplab.schedulers import AshaScheduler, HyperbandScheduler, MedianScheduler, Scheduler
from sweeplab.testing.schedulers import SchedulerContract
from sweeplab.types import Goal


class TestAshaContract(SchedulerContract):
    order_independent = False   # a pruned trial joins no later rung: the rungs follow the arrival order

    def make(self, goal: Goal) -> Scheduler:
        return AshaScheduler(min_iter=1, max_iter=27, eta=3, goal=goal, metric="loss")


class TestAshaBracketsContract(SchedulerContract):
    order_independent = False

    def make(self, goal: Goal) -> Scheduler:
        return AshaScheduler(min_iter=1, max_iter=27, eta=3, brackets=2, goal=goal, metric="loss")


class TestHyperbandMinIterContract(SchedulerContract):
    non_finite_is_worst = False   # W&B drops them from the history

    def make(self, goal: Goal) -> Scheduler:
        return HyperbandScheduler(min_iter=1, eta=3, goal=goal, metric="loss")


class TestHyperbandMaxIterContract(SchedulerContract):
    non_finite_is_worst = False   # W&B drops them from the history

    def make(self, goal: Goal) -> Scheduler:
        return HyperbandScheduler(max_iter=27, s=3, eta=3, strict=False, goal=goal, metric="loss")


class TestMedianContract(SchedulerContract):
    def make(self, goal: Goal) -> Scheduler:
        return MedianScheduler(min_iter=2, warmup=3, goal=goal, metric="loss")
