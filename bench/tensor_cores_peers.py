"""torch peers of bench/tensor_cores.R on the GPU host, run in the same call: 10-NN by torch.cdist and
topk over chunks of queries, and the Gaussian sum by a matrix product (|x|^2 + |y|^2 - 2 x y^T), in
IEEE float32 (torch's default) and with TF32 matrix products allowed. Medians of REPS after a warm-up;
the data are on the GPU already (the R side's times include its transfers). "peak": what cuBLAS
reaches on this GPU (a float32 product of 8192 x 8192 matrices), the ceiling of a tensor-core kernel.
   REPS=3 SCALE=1 CASES=knn100,mnist,gauss64,peak"""
import os, statistics, torch

reps = int(os.environ.get("REPS", "3")); scale = float(os.environ.get("SCALE", "1"))
cases = os.environ.get("CASES", "knn100,mnist,gauss64,peak").split(",")
torch.manual_seed(1)

def bench(fn):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)

def knn(x, k=10, rows=2048):
    return torch.cat([torch.cdist(x[s:s + rows], x).topk(k, dim=1, largest=False).indices for s in range(0, x.shape[0], rows)])

def gauss(x, y, b, g, rows=8192):
    yn = (y * y).sum(1)
    out = []
    for s in range(0, x.shape[0], rows):
        xs = x[s:s + rows]
        r2 = ((xs * xs).sum(1)[:, None] + yn[None, :] - 2 * xs @ y.T).clamp_min_(0)
        out.append(torch.exp(-g * r2) @ b)
    return torch.cat(out)

for tf32 in [False, True]:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    mode = "TF32 allowed" if tf32 else "IEEE float32"
    if "knn100" in cases:
        n = int(1e6 / scale); x = torch.rand(n, 100, device="cuda")
        t = bench(lambda: knn(x))
        print(f"torch cdist+topk ({mode}) 10-NN N = {n} D = 100: {t:.3f} s, {n / t:.2e} queries/s", flush=True)
        del x
    if "mnist" in cases:
        n = int(6e4 / scale); x = torch.rand(n, 784, device="cuda")
        t = bench(lambda: knn(x))
        print(f"torch cdist+topk ({mode}) 10-NN N = {n} D = 784: {t:.3f} s, {n / t:.2e} queries/s", flush=True)
        del x
    if "gauss64" in cases:
        n = int(1e5 / scale); x = torch.rand(n, 64, device="cuda"); y = torch.rand(n, 64, device="cuda")
        b = torch.rand(n, 1, device="cuda")
        t = bench(lambda: gauss(x, y, b, 0.1))
        print(f"torch matmul Gaussian sum ({mode}) N = M = {n} D = 64: {t * 1e3:.1f} ms", flush=True)
    if "peak" in cases:
        n = 8192; a = torch.rand(n, n, device="cuda"); c = torch.rand(n, n, device="cuda")
        t = bench(lambda: a @ c)
        print(f"torch matmul ({mode}) n = {n}: {t * 1e3:.2f} ms, {2 * n**3 / t / 1e12:.1f} TFLOP/s", flush=True)
        del a, c
