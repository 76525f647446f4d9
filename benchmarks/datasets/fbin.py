#!/usr/bin/env python3
"""DiskANN file layouts, little-endian, row-major.

  vectors  .fbin : [u32 n][u32 dim][n*dim f32]
  truth    .bin  : [u32 nq][u32 k][nq*k u32 ids][nq*k f32 dists]   (ascending, ties -> smaller id)

As a tool:
  fbin.py info FILE...                 header, and whether the file size matches it
  fbin.py cat [--rows N] OUT IN...     concatenate (same dim), keeping at most N rows, and the
                                       .txt sidecars (one line a row) if all inputs have one
  fbin.py split IN.fbin NQ QUERY BASE  first NQ rows -> QUERY, the rest -> BASE (with .txt sidecars)
"""
import os
import struct
import sys

import numpy as np


def read_fbin(path):
    """Memory-mapped (n, dim) float32 view."""
    n, d = np.fromfile(path, dtype="<u4", count=2)
    return np.memmap(path, dtype="<f4", mode="r", offset=8, shape=(int(n), int(d)))


def write_fbin(path, x, rows_per_write=100_000):
    """Write atomically (temp file, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<II", *x.shape))
        for s in range(0, x.shape[0], rows_per_write):
            f.write(np.ascontiguousarray(x[s:s + rows_per_write], dtype="<f4").tobytes())
    os.replace(tmp, path)


def read_gt(path):
    """(ids u32 (nq, k), dists f32 (nq, k))."""
    nq, k = (int(v) for v in np.fromfile(path, dtype="<u4", count=2))
    ids = np.fromfile(path, dtype="<u4", count=nq * k, offset=8).reshape(nq, k)
    dists = np.fromfile(path, dtype="<f4", count=nq * k, offset=8 + 4 * nq * k).reshape(nq, k)
    return ids, dists


def write_gt(path, ids, dists):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<II", *ids.shape))
        f.write(ids.astype("<u4").tobytes())
        f.write(dists.astype("<f4").tobytes())
    os.replace(tmp, path)


def _copy_txt(outs_and_lines):
    for path, lines in outs_and_lines:
        with open(path + ".txt", "w", encoding="utf-8") as f:
            f.writelines(lines)


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "info":
        for p in args:
            n, d = (int(v) for v in np.fromfile(p, dtype="<u4", count=2))
            size = os.path.getsize(p)
            want_v, want_gt = 8 + 4 * n * d, 8 + 8 * n * d
            kind = "fbin" if size == want_v else "gt" if size == want_gt else "SIZE MISMATCH"
            print(f"{p}: {kind} n={n} dim/k={d} bytes={size}")
    elif cmd == "cat":
        rows = None
        if args[0] == "--rows":
            rows, args = int(args[1]), args[2:]
        out, ins = args[0], args[1:]
        xs = [read_fbin(p) for p in ins]
        assert len({x.shape[1] for x in xs}) == 1, "dims differ"
        x = (np.concatenate(xs) if len(xs) > 1 else xs[0])[:rows]
        write_fbin(out, x)
        if all(os.path.exists(p + ".txt") for p in ins):
            lines = [l for p in ins for l in open(p + ".txt", encoding="utf-8")][:rows]
            assert len(lines) == x.shape[0], "sidecar .txt and vectors differ in rows"
            _copy_txt([(out, lines)])
        print(out, x.shape[0], x.shape[1])
    elif cmd == "split":
        src, nq, qo, bo = args[0], int(args[1]), args[2], args[3]
        x = read_fbin(src)
        write_fbin(qo, x[:nq])
        write_fbin(bo, x[nq:])
        if os.path.exists(src + ".txt"):
            lines = open(src + ".txt", encoding="utf-8").readlines()
            _copy_txt([(qo, lines[:nq]), (bo, lines[nq:])])
        print("query", nq, "base", x.shape[0] - nq, "dim", x.shape[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:] or ["help"])
