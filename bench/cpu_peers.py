"""pykeops (CPU) for the cases of the rkeops CPU benchmark, N = M = 10^4, D = 3, medians of 3 after a
warm-up; run by bench/cpu.sh right before the rkeops engine benchmark, so the ratios come from one run."""
import sys, time, statistics, numpy as np
from pykeops.numpy import LazyTensor

def med(fn, reps=3):
    fn()
    ts = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); ts.append(time.perf_counter() - s)
    return statistics.median(ts)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
rng = np.random.default_rng(0)
x = rng.random((n, 3)); y = rng.random((n, 3)); b = rng.random((n, 1))
for dt in ("float32", "float64"):
    xx, yy, bb = x.astype(dt), y.astype(dt), b.astype(dt)
    def gauss():
        xi = LazyTensor(xx[:, None, :]); yj = LazyTensor(yy[None, :, :])
        return ((-((xi - yj) ** 2).sum(-1)).exp() * LazyTensor(bb[None, :, :])).sum(1)
    print(f"pykeops gauss D=3 {dt} N = M = {n}: {med(gauss):.3f} s", flush=True)
def knn():
    xi = LazyTensor(x.astype("float32")[:, None, :]); yj = LazyTensor(y.astype("float32")[None, :, :])
    return ((xi - yj) ** 2).sum(-1).argKmin(K=10, dim=1)
print(f"pykeops argkmin K=10 float32 N = M = {n}: {med(knn):.3f} s", flush=True)
