#!/usr/bin/env python3
"""Prints Fashion-MNIST images as PostgreSQL COPY text rows: id, label, embedding (real[]).

Reads the IDX files of Debian's dataset-fashion-mnist package (standard library only), so
the demo needs no Python packages. Usage:
    fashion_mnist_copy.py train|test [LIMIT] | psql -c "COPY t (id, label, embedding) FROM STDIN"
The 60,000 train images are the base set and the 10,000 test images the queries, the same
split as ann-benchmarks' fashion-mnist-784-euclidean; pixels are 0..255, 784 dimensions.
"""
import gzip
import struct
import sys

DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    if magic == 2051:  # images: count, rows, cols, then bytes
        rows, cols = struct.unpack(">II", data[8:16])
        size = rows * cols
        return [data[16 + i * size:16 + (i + 1) * size] for i in range(count)]
    if magic == 2049:  # labels
        return list(data[8:8 + count])
    raise SystemExit(f"{path}: not an IDX image or label file (magic {magic})")


def main():
    split = sys.argv[1] if len(sys.argv) > 1 else "train"
    if split not in ("train", "test"):
        raise SystemExit("usage: fashion_mnist_copy.py train|test [LIMIT]")
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(f"{DIR}/{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(f"{DIR}/{prefix}-labels-idx1-ubyte.gz")
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else len(images)
    out = sys.stdout
    for i, (image, label) in enumerate(zip(images[:limit], labels)):
        out.write(f"{i}\t{label}\t{{{','.join(map(str, image))}}}\n")


if __name__ == "__main__":
    main()
