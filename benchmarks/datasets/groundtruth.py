#!/usr/bin/env python3
"""Exact k-NN ground truth by blocked brute force (numpy BLAS). The base is memory-mapped and each
nq x block distance matrix is kept near --mem-mb, so it runs in ~2 GB for 10K queries.

usage: groundtruth.py BASE.fbin QUERY.fbin OUT.bin [--k 100] [--metric l2|ip|cos] [--mem-mb 512]
Output: [u32 nq][u32 k][nq*k u32 ids][nq*k f32 dists], ascending, ties broken by the smaller id.
Distances: squared L2 for l2, -<q,x> for ip, 1-cos for cos.
"""
import argparse, sys, time

import numpy as np

from fbin import read_fbin, write_gt

ap = argparse.ArgumentParser()
ap.add_argument("base")
ap.add_argument("query")
ap.add_argument("out")
ap.add_argument("--k", type=int, default=100)
ap.add_argument("--metric", default="l2", choices=["l2", "ip", "cos"])
ap.add_argument("--mem-mb", type=int, default=512)
a = ap.parse_args()

X, Q = read_fbin(a.base), read_fbin(a.query)
assert X.shape[1] == Q.shape[1], "dim mismatch"
q = np.array(Q, dtype=np.float32)
if a.metric == "cos":
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30)
k, nq = a.k, len(q)
best_d = np.full((nq, k), np.inf, dtype=np.float32)
best_i = np.full((nq, k), -1, dtype=np.int64)
qn = (q * q).sum(1)[:, None]
block = max(1024, a.mem_mb * 2**20 // 4 // nq)   # sized by nq: a fixed block OOMs with 10K queries
t0 = time.time()
for s in range(0, X.shape[0], block):
    x = np.array(X[s:s + block], dtype=np.float32)
    if a.metric == "cos":
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    d = q @ x.T
    if a.metric == "l2":          # |q|^2 - 2<q,x> + |x|^2, in place
        d *= -2
        d += qn
        d += (x * x).sum(1)[None, :]
    elif a.metric == "ip":
        np.negative(d, out=d)
    else:
        np.subtract(1, d, out=d)
    kk = min(k, d.shape[1])
    part = np.argpartition(d, kk - 1, axis=1)[:, :kk]
    cd = np.concatenate([best_d, np.take_along_axis(d, part, 1)], 1)
    ci = np.concatenate([best_i, part + s], 1)
    o = np.lexsort((ci, cd), axis=1)[:, :k]   # by distance, then id
    best_d, best_i = np.take_along_axis(cd, o, 1), np.take_along_axis(ci, o, 1)
    del d, part
    if (s // block) % 20 == 0:
        print(f"  {min(s + block, X.shape[0])}/{X.shape[0]} rows, {time.time() - t0:.0f}s", file=sys.stderr)
if a.metric == "l2":
    best_d = np.maximum(best_d, 0)
assert (best_i >= 0).all(), "base smaller than k"
write_gt(a.out, best_i, best_d)
print(f"ground truth nq={nq} k={k} metric={a.metric} in {time.time() - t0:.1f}s", file=sys.stderr)
