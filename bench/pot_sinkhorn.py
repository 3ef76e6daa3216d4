"""Reference values of entropic optimal transport from POT (Python Optimal Transport), float64.

Used by bench/algorithms.R to check keops_sinkhorn(). Usage:
    python3 bench/pot_sinkhorn.py x.csv y.csv a.csv b.csv eps
x, y: points, one per row (comma-separated, no header); a, b: weights, one per line; eps: the
temperature (blur^2 for keops_sinkhorn's p = 2). Prints name=value lines:
    pot_version
    ot_xy, ot_xx, ot_yy   OT_eps in the dual (GeomLoss) convention, <a, f> + <b, g> with POT's
                          log potentials (its error is second order in the marginals' error)
    ot_xy_plan, ...       the same, <P, C> + eps KL(P | a x b), from POT's plan P (equal at the
                          fixed point; first order in the marginals' error): a check
    iterations_xy, marginal_error_xy, ...   Sinkhorn's last run and the plan's L1 marginal error
    divergence            ot_xy - ot_xx / 2 - ot_yy / 2, the debiased Sinkhorn divergence
    divergence_plan       the same from the ot_*_plan values
    emd2, emd2_status     the exact (unregularised) OT cost, W2^2 / 2, and POT's warning if any
for the cost C(x, y) = |x - y|^2 / 2.
"""
import sys

import numpy as np
import ot


def cost(x, y):
    # by differences rather than |x|^2 + |y|^2 - 2 x.y, which loses digits to cancellation
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(axis=2) / 2


def entropic(x, y, a, b, eps):
    C = cost(x, y)
    # Plain Sinkhorn crawls here (a diffusion of step blur over the clouds: ~1e4 iterations leave
    # a marginal error ~1e-5, and the plan's value is first order in it), so POT's L-BFGS on the
    # same dual (smooth OT, negative entropy) starts it near the optimum. That dual's potentials
    # give the plan exp((alpha_i + beta_j - C_ij) / eps - 1): log_u = alpha / eps - 1/2, likewise v.
    _, lb = ot.smooth.smooth_ot_dual(a, b, C, eps, reg_type="kl", numItermax=20000, stopThr=1e-15, log=True)
    start = (lb["alpha"] / eps - 0.5, lb["beta"] / eps - 0.5)
    # stopThr 1e-12 is not reached in 2000 iterations; the marginal error reached is printed
    _, log = ot.sinkhorn(a, b, C, eps, method="sinkhorn_log", numItermax=2000, stopThr=1e-12,
                         warmstart=start, log=True, warn=False)
    # POT's plan is exp(log_u_i + log_v_j - C_ij / eps) (kept in the log domain, so no underflow
    # enters the KL term); its potentials are f = eps (log_u - log a), g = eps (log_v - log b).
    log_p = log["log_u"][:, None] + log["log_v"][None, :] - C / eps
    P = np.exp(log_p)
    primal = np.sum(P * C) + eps * np.sum(P * (log_p - np.log(a)[:, None] - np.log(b)[None, :]))
    dual = eps * (np.dot(a, log["log_u"] - np.log(a)) + np.dot(b, log["log_v"] - np.log(b)))
    marginal_error = np.abs(P.sum(axis=1) - a).sum() + np.abs(P.sum(axis=0) - b).sum()
    return primal, dual, log["niter"] + 1, marginal_error


def main(argv):
    if len(argv) != 6:
        sys.exit(__doc__)
    x, y = (np.loadtxt(f, delimiter=",", ndmin=2, dtype=np.float64) for f in argv[1:3])
    a, b = (np.loadtxt(f, delimiter=",", ndmin=1, dtype=np.float64) for f in argv[3:5])
    a, b = a / a.sum(), b / b.sum()
    eps = float(argv[5])
    out = {"pot_version": ot.__version__}
    for name, (p, q, wp, wq) in {"xy": (x, y, a, b), "xx": (x, x, a, a), "yy": (y, y, b, b)}.items():
        primal, dual, niter, err = entropic(p, q, wp, wq, eps)
        out["ot_" + name] = dual
        out["ot_%s_plan" % name] = primal
        out["iterations_" + name] = niter
        out["marginal_error_" + name] = err
    out["divergence"] = out["ot_xy"] - out["ot_xx"] / 2 - out["ot_yy"] / 2
    out["divergence_plan"] = out["ot_xy_plan"] - out["ot_xx_plan"] / 2 - out["ot_yy_plan"] / 2
    out["emd2"], log = ot.emd2(a, b, cost(x, y), numItermax=10_000_000, log=True)
    out["emd2_status"] = log["warning"] or "converged"
    for k, v in out.items():
        print("%s=%s" % (k, repr(float(v)) if isinstance(v, (float, np.floating)) else v))


if __name__ == "__main__":
    main(sys.argv)
