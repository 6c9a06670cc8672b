"""Summarises a trace of bench/cupti/trace.c: for each CUDA graph launched often enough
(a device loop's body, a CUDA-graph step of the peer), the time of one launch, the time
its kernels keep the GPU busy, and the kernels grouped by name, as a short table.

    python3 summarize.py TRACE [--min-kernels 50] [--min-launches 10] [--top 18]
"""
import argparse
import collections
import re
import statistics


def kernel_class(name: str) -> str:
    """A kernel's name without the numbers XLA and Triton append to tell copies apart."""
    name = re.sub(r"(_|\.)\d+(?=($|_|\.))", "", name)
    return name[:70]


def union_length(intervals):
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--min-kernels", type=int, default=50)
    p.add_argument("--min-launches", type=int, default=10)
    p.add_argument("--top", type=int, default=18)
    a = p.parse_args()
    graphs = collections.defaultdict(list)  # graph id -> [(start, end, node, class)]
    for line in open(a.trace, errors="replace"):
        f = line.rstrip("\n").split("\t")
        if len(f) < 9 or f[3] == "0":
            continue
        name = kernel_class(f[8]) if f[0] == "K" else {"C": "memcpy", "S": "memset"}[f[0]]
        graphs[int(f[3])].append((int(f[1]), int(f[2]), int(f[4]), name))
    for gid, recs in sorted(graphs.items()):
        recs.sort()
        seen = collections.Counter()
        launches = collections.defaultdict(list)
        for r in recs:  # the k-th record of a node belongs to the k-th launch
            launches[seen[r[2]]].append(r)
            seen[r[2]] += 1
        nodes = len(seen)
        full = [l for l in launches.values() if len(l) == nodes]
        if nodes < a.min_kernels or len(full) < a.min_launches:
            continue
        spans = [max(r[1] for r in l) - min(r[0] for r in l) for l in full]
        busy = [union_length([(r[0], r[1]) for r in l]) for l in full]
        starts = sorted(min(r[0] for r in l) for l in full)
        periods = [b - a_ for a_, b in zip(starts, starts[1:])]
        per_class = collections.defaultdict(list)  # class -> per-launch summed time
        counts = collections.Counter(r[3] for r in full[0])
        for l in full:
            sums = collections.Counter()
            for r in l:
                sums[r[3]] += r[1] - r[0]
            for c, t in sums.items():
                per_class[c].append(t)
        span = statistics.median(spans)
        print(f"\ngraph {gid}: {len(full)} launches of {nodes} nodes; per launch (medians): "
              f"span {span / 1e3:.1f} us, kernels busy {statistics.median(busy) / 1e3:.1f} us, "
              f"idle {(span - statistics.median(busy)) / 1e3:.1f} us, "
              f"launch to launch {statistics.median(periods) / 1e3 if periods else 0:.1f} us")
        print(f"  {'kernel':70s} {'per launch':>10s} {'us':>9s} {'us each':>8s} {'of span':>7s}")
        rows = sorted(per_class.items(), key=lambda kv: -statistics.median(kv[1]))
        for c, ts in rows[:a.top]:
            t = statistics.median(ts)
            print(f"  {c:70s} {counts[c]:10d} {t / 1e3:9.1f} {t / 1e3 / counts[c]:8.2f} {t / span:7.1%}")
        rest = rows[a.top:]
        if rest:
            t = sum(statistics.median(ts) for _, ts in rest)
            n = sum(counts[c] for c, _ in rest)
            print(f"  {'(' + str(len(rest)) + ' more classes)':70s} {n:10d} {t / 1e3:9.1f} {t / 1e3 / max(n, 1):8.2f} {t / span:7.1%}")


if __name__ == "__main__":
    main()
