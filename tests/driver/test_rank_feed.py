"""When the rank rule gets a trial's objective vector (sweeplab.driver.rank_feed)."""

from __future__ import annotations

from sweeplab.driver.rank_feed import RankFeed


def test_a_step_is_judged_at_its_last_objective_point_with_every_objective_of_that_step():
    feed = RankFeed(("acc", "latency"))
    assert feed.add(0, 1, "acc", 0.5, closes_step=False) is None        # latency follows in the batch
    assert feed.add(0, 1, "latency", 9.0, closes_step=True) == (0.5, 9.0)
    assert feed.add(0, 2, "acc", 0.6, closes_step=False) is None
    assert feed.add(0, 2, "latency", 8.0, closes_step=True) == (0.6, 8.0)


def test_an_objective_logged_once_is_carried_and_a_changing_one_is_waited_for():
    feed = RankFeed(("acc", "size"))
    assert feed.add(0, 0, "size", 3.0, closes_step=True) is None        # acc not yet reported
    assert feed.add(0, 1, "acc", 0.5, closes_step=True) == (0.5, 3.0)   # size: logged once, carried
    assert feed.add(0, 2, "size", 4.0, closes_step=True) == (0.5, 4.0)  # acc: once so far, carried
    # both have now been reported at two steps: a step missing one of them waits for it
    assert feed.add(0, 3, "acc", 0.7, closes_step=True) is None
    assert feed.add(0, 3, "size", 4.0, closes_step=True) == (0.7, 4.0)
    assert feed.add(1, 3, "acc", 0.1, closes_step=True) is None          # trials are separate
