"""A failed trial's constraint rating is the same live and after `resume`.

Live, a trial that failed before it reported any constrained metric has no feasibility (not "infeasible": no
violations on its record, the store's `feasible` left empty); a resume rebuilt it from its stored metrics as
breaking every constraint by 1.0 (infeasible), so what the scheduler and the searcher were given of it differed
between the two drivers. A failed trial that reported a constrained metric is rated from it either way.
"""

from __future__ import annotations

import pytest

from sweeplab.testing.fake import Script

CONSTRAINTS = [{"metric": "mem", "max": 1.0}, {"metric": "lat", "max": 2.0}]
NOTHING = Script().fail()
REPORTED = Script().reports("mem", [3.0], every=1.0).fail(after=1.0)


@pytest.mark.parametrize("script", [NOTHING, REPORTED], ids=["reported-nothing", "reported-mem"])
def test_a_failed_trial_is_rated_the_same_live_and_resumed(sim, script):
    out = sim.run(script, budget={"trials": 1}, constraints=CONSTRAINTS, trial={"retries": 0})
    assert out.counts.get("failed") == 1, out.counts
    live = next(iter(sim.driver.trials.values()))
    rated = (live.violations, live.feasible)
    driver, _ = sim.make(script, budget={"trials": 1}, constraints=CONSTRAINTS, trial={"retries": 0})
    driver.resume()
    resumed = next(iter(driver.trials.values()))
    assert (resumed.violations, resumed.feasible) == rated
    assert rated == ((None, None) if script is NOTHING else ((2.0, 1.0), False))
