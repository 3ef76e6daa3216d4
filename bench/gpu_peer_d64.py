"""A fused Triton peer for the Gaussian kernel sum in dimension 64 (the shared peers script covers
D = 3): a_i = sum_j exp(-|x_i - y_j|^2) b_j with |x - y|^2 = |x|^2 + |y|^2 - 2 <x, y>, the scalar
products by tl.dot in IEEE float32 (no TF32, so its accuracy matches ours)."""
import statistics, torch, triton, triton.language as tl

@triton.jit
def gauss64(X, Y, B, XN, YN, OUT, N, M, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    i = pid * BM + tl.arange(0, BM); mi = i < N
    k = tl.arange(0, D)
    x = tl.load(X + i[:, None] * D + k[None, :], mask=mi[:, None], other=0.0)
    xn = tl.load(XN + i, mask=mi, other=0.0)
    acc = tl.zeros([BM], dtype=tl.float32)
    for j0 in range(0, M, BN):
        j = j0 + tl.arange(0, BN); mj = j < M
        y = tl.load(Y + j[:, None] * D + k[None, :], mask=mj[:, None], other=0.0)
        yn = tl.load(YN + j, mask=mj, other=0.0)
        b = tl.load(B + j, mask=mj, other=0.0)
        xy = tl.dot(x, tl.trans(y), input_precision="ieee")
        r2 = tl.maximum(xn[:, None] + yn[None, :] - 2.0 * xy, 0.0)
        acc += tl.sum(tl.exp(-r2) * b[None, :], axis=1)
    tl.store(OUT + i, acc, mask=mi)

def run(x, y, b):
    N, D = x.shape; M = y.shape[0]
    out = torch.empty(N, device=x.device, dtype=x.dtype)
    xn = (x * x).sum(1); yn = (y * y).sum(1)
    gauss64[(triton.cdiv(N, 64),)](x, y, b, xn, yn, out, N, M, D=D, BM=64, BN=64)
    return out

def bench(fn, reps=5):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)

N = 100_000
x = torch.rand(N, 64, device="cuda"); y = torch.rand(N, 64, device="cuda"); b = torch.randn(N, device="cuda")
ref = torch.cat([torch.exp(-torch.cdist(x[:512].double(), y.double()) ** 2) @ b.double()])
got = run(x, y, b)[:512].double()
print("  triton D=64 rel err", ((got - ref).norm() / ref.norm()).item())
t = bench(lambda: run(x, y, b))
print(f"gauss_triton_f32               N={N:>8d} D= 64 {t*1e3:10.3f} ms  {N*N/t/1e9:8.1f} Gpairs/s", flush=True)
