"""GeomLoss 0.3.1 references for keops_sinkhorn(tol = NULL) (bench/sinkhorn_geomloss.R writes the cases).

python3 bench/sinkhorn_geomloss.py DIR: for each DIR/<case>.csv (columns: kind x|y, weight, coordinates;
a first row 'settings,blur,p,reach' where reach 0 is None), writes DIR/<case>.out.csv: the loss of
SamplesLoss("sinkhorn", p, blur, reach, scaling = 0.5, debias = True, backend = "tensorized") in
float64, then its gradient in x (autodiff through GeomLoss's last extrapolation), row by row.
"""
import glob, sys
import numpy as np
import torch
from geomloss import SamplesLoss

for path in sorted(glob.glob(sys.argv[1] + "/*.csv")):
    if path.endswith(".out.csv"):
        continue
    rows = [l.strip().split(",") for l in open(path)]
    blur, p, reach = (float(v) for v in rows[0][1:4])
    data = rows[1:]
    pts = lambda k: torch.tensor([[float(v) for v in r[2:]] for r in data if r[0] == k], dtype=torch.float64)
    wts = lambda k: torch.tensor([float(r[1]) for r in data if r[0] == k], dtype=torch.float64)
    x, y, a, b = pts("x").requires_grad_(True), pts("y"), wts("x"), wts("y")
    loss = SamplesLoss("sinkhorn", p=int(p), blur=blur, reach=None if reach == 0 else reach, scaling=0.5,
                       debias=True, backend="tensorized")
    value = loss(a, x, b, y)
    (grad,) = torch.autograd.grad(value, [x])
    out = np.vstack([np.full((1, x.shape[1]), value.item()), grad.numpy()])
    np.savetxt(path[:-4] + ".out.csv", out, delimiter=",", fmt="%.17g")
