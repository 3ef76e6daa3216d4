"""pykeops (CPU) side of bench/cpu_compare.R: times one case at one size and precision.

  python3 bench/cpu_compare_pykeops.py CASE D PRECISION DATA N REPS WARMUP OUT

CASE: gauss | argkmin | logsumexp | grad. DATA: the file written by cpu_compare.R (float64, row-major:
x N x D, y N x D, b N, e N). WARMUP: "full" (one call at full size) or "small" (one call on the first
1000 rows: it absorbs pykeops' compilation when a full call would not fit in the time budget).
Prints "TIME <median seconds>" and writes the result of the last call to OUT (float64, row-major)
for cpu_compare.R to check against rkeops.
"""
import sys, time, statistics
import numpy as np
from pykeops.numpy import LazyTensor

case, D, precision, data, N, reps, warmup, out = sys.argv[1:9]
D, N, reps = int(D), int(float(N)), int(reps)

raw = np.fromfile(data, dtype=np.float64)
x, y, b, e = np.split(raw, [N * D, 2 * N * D, 2 * N * D + N])
x, y = x.reshape(N, D), y.reshape(N, D)
b, e = b.reshape(N, 1), e.reshape(N, 1)


def inputs(n):
    """The first n rows, converted to the precision outside the timings (as a pykeops user holds them)."""
    return [np.ascontiguousarray(a[:n].astype(precision)) for a in (x, y, b, e)]


def run(xx, yy, bb, ee):
    xi, yj = LazyTensor(xx[:, None, :]), LazyTensor(yy[None, :, :])
    bj, ei = LazyTensor(bb[None, :, :]), LazyTensor(ee[:, None, :])
    d2 = xi.sqdist(yj)
    if case == "gauss":
        return ((-d2).exp() * bj).sum(dim=1, backend="CPU")
    if case == "argkmin":
        return d2.argKmin(K=10, dim=1, backend="CPU")
    if case == "logsumexp":
        return (-d2 + bj).logsumexp(dim=1, backend="CPU")
    if case == "grad":
        return ((-d2).exp() * bj).grad(xi, ei).sum(dim=1, backend="CPU")
    raise ValueError(f"unknown case {case}")


run(*inputs(N if warmup == "full" else min(N, 1000)))
full = inputs(N)
times = []
for _ in range(reps):
    start = time.perf_counter()
    res = run(*full)
    times.append(time.perf_counter() - start)
np.asarray(res, dtype=np.float64).tofile(out)
print(f"TIME {statistics.median(times):.6g}", flush=True)
