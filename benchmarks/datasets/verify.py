#!/usr/bin/env python3
"""Check a prepared dataset directory: base.fbin, query.fbin, gt100.bin.

Structure: file sizes match headers, dims agree, no NaN/inf, truth has nq = #queries, ids < n,
distances ascending. Truth: for a random subset of queries, recompute the exact squared L2 to
every base row independently (float64, explicit differences rather than the GT tool's
|q|^2 - 2<q,x> + |x|^2 BLAS path) and compare the id lists and distances.

usage: verify.py DIR [DIR...] [--queries 20] [--seed 1]
Exits non-zero when a check fails.
"""
import argparse, os, sys, time

import numpy as np

from fbin import read_fbin, read_gt

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+")
ap.add_argument("--queries", type=int, default=20)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
ok = True


def check(cond, msg):
    global ok
    if not cond:
        ok = False
        print("  FAIL:", msg)


for d in a.dirs:
    t0 = time.time()
    X, Q = read_fbin(os.path.join(d, "base.fbin")), read_fbin(os.path.join(d, "query.fbin"))
    gtp = os.path.join(d, "gt100.bin")
    ids, dists = read_gt(gtp)
    n, dim = X.shape
    nq, k = ids.shape
    print(f"{d}: base {n} x {dim}, query {Q.shape[0]} x {Q.shape[1]}, truth {nq} x {k}")
    for p, want in ((os.path.join(d, "base.fbin"), 8 + 4 * n * dim),
                    (os.path.join(d, "query.fbin"), 8 + 4 * Q.size), (gtp, 8 + 8 * nq * k)):
        check(os.path.getsize(p) == want, f"{p} has {os.path.getsize(p)} bytes, header says {want}")
    check(Q.shape[1] == dim and nq == Q.shape[0] and k == 100, "shapes disagree")
    check(ids.max() < n and (np.diff(dists, axis=1) >= 0).all(), "truth ids out of range or not ascending")
    norms = np.concatenate([np.linalg.norm(X[s:s + 200000], axis=1) for s in range(0, n, 200000)])
    check(np.isfinite(norms).all() and np.isfinite(np.asarray(Q)).all(), "NaN or inf in vectors")
    print(f"  base norms {norms.min():.4f}..{norms.max():.4f}; queries whose nearest base row is at "
          f"distance 0: {int((dists[:, 0] == 0).sum())}")

    sel = np.sort(np.random.default_rng(a.seed).choice(nq, min(a.queries, nq), replace=False))
    q = np.asarray(Q[sel], dtype=np.float64)
    full = np.empty((len(sel), n))
    for s in range(0, n, 50000):
        x = np.asarray(X[s:s + 50000], dtype=np.float64)
        for r in range(len(sel)):
            diff = x - q[r]
            full[r, s:s + len(x)] = np.einsum("ij,ij->i", diff, diff)
    same = recall = 0
    max_rel = 0.0
    for r, qi in enumerate(sel):
        bf = np.lexsort((np.arange(n), full[r]))[:k]          # by distance, then id
        same += np.array_equal(bf, ids[qi])
        recall += len(np.intersect1d(bf, ids[qi])) / k
        ref = full[r, ids[qi]]                                 # the truth's own ids, recomputed
        max_rel = max(max_rel, float(np.max(np.abs(ref - dists[qi]) / np.maximum(ref, 1e-6))))
        check(full[r, ids[qi][-1]] <= full[r, bf[-1]] * (1 + 1e-4) + 1e-6,
              f"query {qi}: truth's k-th neighbour is farther than brute force's")
    recall /= len(sel)
    check(recall > 0.999 and max_rel < 1e-3, f"truth disagrees with brute force (recall {recall:.4f})")
    print(f"  brute force on {len(sel)} queries vs {n} rows: identical id lists {same}/{len(sel)}, "
          f"recall@{k} {recall:.4f}, max relative distance error {max_rel:.1e} ({time.time() - t0:.0f}s)")
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
