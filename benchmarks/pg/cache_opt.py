#!/usr/bin/env python3
"""Belady's optimal (clairvoyant) hit rate of an edge-page cache over a recorded trace: the
ceiling no replacement policy can beat, to read the policies' numbers against.

    cache_opt.py TRACE_DIR FRAMES [FRAMES...]

TRACE_DIR holds the trace-*.bin files a server wrote with NAVIS_CACHE_TRACE set (engine
cache/trace.rs: [u64 ns][u64 tag][u32 page][u32 kind]); lookups only (kind 0 search, 1 insert),
pages treated as immutable ids. Compare with `navis-bench cache-replay` at the same frame counts.
"""
import glob
import heapq
import sys

import numpy as np

REC = np.dtype([("t", "<u8"), ("tag", "<u8"), ("page", "<u4"), ("kind", "<u4")])


def main():
    trace_dir, sizes = sys.argv[1], [int(x) for x in sys.argv[2:]]
    a = np.concatenate([np.fromfile(f, dtype=REC) for f in glob.glob(f"{trace_dir}/trace-*.bin")])
    a = a[np.argsort(a["t"], kind="stable")]
    a = a[a["kind"] <= 1]
    keys = (a["tag"].astype(np.uint64) * np.uint64(1 << 32) + a["page"]).tolist()
    kind = a["kind"].tolist()
    n = len(keys)
    nxt = [n] * n
    last = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(keys[i], n)
        last[keys[i]] = i
    for frames in sizes:
        cached, heap, hits, looks = {}, [], [0, 0], [0, 0]
        for i in range(n):
            p, k = keys[i], kind[i]
            looks[k] += 1
            if p in cached:
                hits[k] += 1
            elif len(cached) >= frames:
                while True:  # evict the page used furthest in the future (stale heap entries skipped)
                    nu, q = heapq.heappop(heap)
                    if cached.get(q) == -nu:
                        del cached[q]
                        break
            cached[p] = nxt[i]
            heapq.heappush(heap, (-nxt[i], p))
        print(f"OPT {frames} frames: hit rate {sum(hits) / n:.3f}, search {hits[0] / max(looks[0], 1):.3f}, "
              f"insert {hits[1] / max(looks[1], 1):.3f} ({n} lookups)")


if __name__ == "__main__":
    main()
