"""Timing shared by the benchmarks: medians of interleaved runs."""
import statistics
import time


def median_ms(fns, warmup, iters):
    """Median milliseconds of each of `fns`. Runs are interleaved, one of each per round, so that
    load from other processes falls on every peer alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            t.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]
