#!/usr/bin/env python3
"""Fashion-MNIST -> base.fbin / query.fbin, the split of ann-benchmarks' fashion-mnist-784-euclidean:
base = the 60,000 training images, queries = the 10,000 test images, 784-d float32 raw pixels 0..255, L2.

Source: Debian package `dataset-fashion-mnist` (MIT), the original IDX .gz files.
usage: fmnist.py OUTDIR [--src /usr/share/datasets/fashion-mnist]
"""
import argparse, gzip, os, struct

import numpy as np

from fbin import write_fbin

ap = argparse.ArgumentParser()
ap.add_argument("outdir")
ap.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
a = ap.parse_args()
os.makedirs(a.outdir, exist_ok=True)
for split, name in (("train", "base"), ("t10k", "query")):
    with gzip.open(os.path.join(a.src, f"{split}-images-idx3-ubyte.gz"), "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        assert magic == 2051, "not an IDX image file"
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, rows * cols).astype("<f4")
    write_fbin(os.path.join(a.outdir, f"{name}.fbin"), x)
    print(name, x.shape)
