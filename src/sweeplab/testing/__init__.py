"""Contract test suites shipped with sweeplab: every backend / searcher / scheduler passes the same tests."""
