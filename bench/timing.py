"""Timing shared by the benchmarks: medians of interleaved runs."""
import statistics
import time


def median_ms(fns, warmup, iters, clock=time.perf_counter):
    """Median milliseconds of each of `fns`. Runs are interleaved, one of each per round, so that
    load from other processes falls on every peer alike. `clock`: perf_counter (wall time) or,
    say, process_time (CPU time of the process)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, t in zip(fns, times):
            t0 = clock()
            fn()
            t.append((clock() - t0) * 1e3)
    return [statistics.median(t) for t in times]
