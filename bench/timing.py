"""Timing shared by the benchmarks: medians of interleaved runs."""
import statistics
import time


def median_ms(fns, warmup, iters, clock=time.perf_counter, block=1, warmup_s=0.0):
    """Median milliseconds of each of `fns`. Runs are interleaved, one of each per round, so that
    load from other processes falls on every peer alike. `clock`: perf_counter (wall time) or,
    say, process_time (CPU time of the process). With `block` > 1 each round runs each peer
    `block` times in a row, the first untimed: on a machine of few cores a peer timed right after
    another shares the cores with the other's threads while they still spin (ORT's intra-op
    threads spin after a run by default), and its caches hold the other's weights. The warm-up
    is `warmup` rounds and, with `warmup_s`, at least that many seconds: a session's first few
    hundred milliseconds can be slower than the rest (docs/performance.md, twentieth session)."""
    start = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - start < warmup_s:
        for fn in fns:
            fn()
        done += 1
    times = [[] for _ in fns]
    rounds = iters if block == 1 else -(-iters // (block - 1))
    for _ in range(rounds):
        for fn, t in zip(fns, times):
            if block > 1:
                fn()
            for _ in range(max(1, block - 1)):
                t0 = clock()
                fn()
                t.append((clock() - t0) * 1e3)
    return [statistics.median(t) for t in times]
