"""Trial functions for the benchmarks (imported by worker processes)."""

import time


def noop(config, run):
    return {"loss": float(config["x"])}


def sleep_half(config, run):
    time.sleep(float(config.get("seconds", 0.5)))
    return {"loss": float(config["x"])}


def pool_noop(x):
    return x


def pool_sleep(x):
    time.sleep(0.5)
    return x


def log_points(config, run):
    n = int(config["points"])
    t0 = time.perf_counter()
    for i in range(n // 4):
        run.log({"a": i, "b": 1.0, "c": 2.0, "d": 3.0}, step=i)
    run.flush()
    return {"loss": 0.0, "seconds": time.perf_counter() - t0}
