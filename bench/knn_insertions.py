"""How the insertions of the sifted 10-NN kernel fall on a warp (issue 40): 32 lanes of 4 rows each
(128 query rows) against M uniform points in D = 3, the reduced range taken 32 indices at a time as
the kernel does; an index is a candidate of a row when its distance is below the row's current K-th
best. Counts the insertion calls per row and the warp's passes through its insertion loops: as the
kernel runs them (one loop per row slot: the largest count among the lanes, per slot), with the four
slots' loops merged, and with every lane inserting any candidate of the warp (32 per pass). (The
passes are what a deferred insertion would save; measured on an H100, a kernel deferring them was
slower: bench/RESULTS.md, issue 40, fourth part.)
   python3 bench/knn_insertions.py [M]"""
import sys
import numpy as np

rng = np.random.default_rng(1)
K, LANES, SLOTS, GROUP = 10, 32, 4, 32
M = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000
rows = LANES * SLOTS
x, y = rng.random((rows, 3)), rng.random((M, 3))
best = np.full((rows, K), np.inf)
now = merged = cooperative = calls = groups = 0
for start in range(0, M, GROUP * 64):
    d = ((x[:, None, :] - y[None, start:start + GROUP * 64, :]) ** 2).sum(-1)
    for g in range(0, d.shape[1], GROUP):
        dg = d[:, g:g + GROUP]
        candidate = dg < best[:, K - 1][:, None]
        per_row = candidate.sum(1)
        if not per_row.any():
            continue
        groups += 1
        per_lane = per_row.reshape(SLOTS, LANES)
        now += per_lane.max(1).sum()
        merged += per_lane.sum(0).max()
        cooperative += -(-per_row.sum() // LANES)
        calls += per_row.sum()
        for r in np.nonzero(per_row)[0]:
            best[r] = np.sort(np.concatenate([best[r], dg[r, candidate[r]]]))[:K]
print(f"M = {M}: {calls / rows:.1f} insertions per row; groups of 32 indices with a candidate: {groups} of "
      f"{M // GROUP}; warp passes through the insertion loops: {now} (one loop per row slot), {merged} "
      f"(the slots merged), {cooperative} (32 candidates per pass)")
