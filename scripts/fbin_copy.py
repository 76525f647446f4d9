#!/usr/bin/env python3
"""Rows of an .fbin file (int32 n, int32 dim, then n * dim float32) as COPY text for a table
(id int, v real[]): `id` counts from 1 in file order.

    python3 scripts/fbin_copy.py FILE [ROWS]
"""
import array
import struct
import sys


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        n, dim = struct.unpack("<ii", f.read(8))
        rows = min(n, int(sys.argv[2])) if len(sys.argv) > 2 else n
        out = sys.stdout
        for i in range(rows):
            row = array.array("f")
            row.fromfile(f, dim)
            out.write(f"{i + 1}\t{{{','.join(repr(x) for x in row)}}}\n")


if __name__ == "__main__":
    main()
