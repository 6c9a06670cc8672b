"""Summarises a trace of bench/cupti/trace.c: for each CUDA graph launched often enough
(a device loop's body, a CUDA-graph step of the peer), the time of one launch, the time
its kernels keep the GPU busy, and the kernels grouped by name, as a short table.

    python3 summarize.py TRACE [--min-kernels 50] [--min-launches 10] [--top 18]
                               [--layer KERNEL [--layer-kernels N]] [--bursts US]

--bursts groups the kernels by time instead, for work that is not one CUDA graph, or
to see the host between launches: a burst is a run of kernels with no idle gap longer
than US microseconds, and bursts with the same number of kernels count as launches of
one graph. If the trace has host calls (CUPTI_TRACE_API),
each group of bursts also lists the host's CUDA calls from the end of the previous burst
to the end of each one: what the host did before and while the GPU ran it.

--layer also lists one layer of each graph in launch order: the kernels from the middle
occurrence of the kernel class KERNEL (e.g. input_add_reduce_fusion) to the next, or to
the N-th next with --layer-kernels N; "slot" is the time from a kernel's start to the
next one's, which adds up to the layer's time even where kernels overlap (PDL), and
"finish" the time from the previous kernel's end to its own, which a kernel launched
early does not inflate by its wait. TRACE may be gzipped (.gz), as bench/gpu.sh leaves it.
"""
import argparse
import bisect
import collections
import gzip
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
    p.add_argument("--layer", default=None)
    p.add_argument("--layer-kernels", type=int, default=1)
    p.add_argument("--bursts", type=float, default=None)
    a = p.parse_args()
    graphs = collections.defaultdict(list)  # graph id -> [(start, end, node, class)]
    records, calls = [], []  # calls: (start, end, name) of the host's CUDA calls
    opener = gzip.open if a.trace.endswith(".gz") else open  # bench/gpu.sh gzips the traces
    for line in opener(a.trace, "rt", errors="replace"):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 9 and f[0] in "AR":
            calls.append((int(f[1]), int(f[2]), f[8]))
            continue
        if len(f) < 9 or (f[3] == "0" and a.bursts is None):
            continue
        name = kernel_class(f[8]) if f[0] == "K" else {"C": "memcpy", "S": "memset"}[f[0]]
        records.append((int(f[1]), int(f[2]), int(f[4]), name))
        graphs[int(f[3])].append(records[-1])
    previous_end = {}  # burst group -> the end of the burst before each of its bursts
    if a.bursts is not None:
        graphs, previous_end = bursts(records, a.bursts * 1e3)
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
        label = f"bursts of {gid} records" if a.bursts is not None else f"graph {gid}"
        print(f"\n{label}: {len(full)} launches of {nodes} nodes; per launch (medians): "
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
        if a.layer:
            print_layer(full, a.layer, a.layer_kernels)
        if calls and gid in previous_end:
            print_calls(calls, [(previous_end[gid][k], max(r[1] for r in l), min(r[0] for r in l))
                                for k, l in launches.items() if len(l) == nodes])


def bursts(records, gap_ns):
    """Splits records at idle gaps longer than gap_ns into bursts, numbers each burst's
    records in order as its nodes, and keys the bursts by their record count; also
    returns, per count, the end of the burst before each of them (0 for the first)."""
    by_count, previous_end = collections.defaultdict(list), collections.defaultdict(list)
    burst, end, last_end = [], None, 0
    for r in sorted(records) + [None]:
        if r is None or (end is not None and r[0] - end > gap_ns):
            by_count[len(burst)] += [(s, e, i, c) for i, (s, e, _, c) in enumerate(burst)]
            previous_end[len(burst)].append(last_end)
            burst, end, last_end = [], None, end
        if r is not None:
            burst.append(r)
            end = r[1] if end is None else max(end, r[1])
    return by_count, previous_end


def print_calls(calls, windows, top=8):
    """Prints the host's CUDA calls per launch (medians over windows of (from, to,
    first kernel's start)) that start within each window, by time spent in them."""
    per_name = collections.defaultdict(lambda: [[0, 0] for _ in windows])
    waits = []
    calls.sort()
    starts = [c[0] for c in calls]
    for i, (lo, hi, first) in enumerate(windows):
        inside = calls[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]
        for s, e, name in inside:
            per_name[name][i][0] += e - s
            per_name[name][i][1] += 1
        before = [c for c in inside if c[0] < first]
        waits.append((first - lo, first - before[0][0] if before else 0))
    print(f"  host calls per launch (medians over {len(windows)}): previous burst's end to the first kernel "
          f"{statistics.median(w[0] for w in waits) / 1e3:.1f} us, first call to the first kernel "
          f"{statistics.median(w[1] for w in waits) / 1e3:.1f} us")
    rows = sorted(per_name.items(), key=lambda kv: -statistics.median(t for t, _ in kv[1]))
    for name, ts in rows[:top]:
        print(f"    {name[:60]:60s} {statistics.median(n for _, n in ts):6.0f} calls "
              f"{statistics.median(t for t, _ in ts) / 1e3:9.1f} us")


def print_layer(launches, opener: str, count: int):
    """Prints the kernels of one layer with their median duration, slot and finish (the
    time from the previous kernel's end to its own: under an early trigger a kernel's
    start, and so its duration and slot, include its wait for the kernel before it)."""
    order = launches[0]  # every launch runs the nodes in the same order
    dur, slot, finish = (collections.defaultdict(list) for _ in range(3))
    for l in launches:
        for i, (r, nxt) in enumerate(zip(l, l[1:])):
            dur[r[2]].append(r[1] - r[0])
            slot[r[2]].append(nxt[0] - r[0])
            finish[r[2]].append(r[1] - l[i - 1][1] if i else r[1] - r[0])
    starts = [i for i, r in enumerate(order) if r[3].startswith(opener)]
    if len(starts) <= count:
        print(f"  (no layer: {len(starts)} kernels named {opener}*)")
        return
    first = starts[len(starts) // 2]
    last = starts[min(len(starts) // 2 + count, len(starts) - 1)]
    print(f"  one layer, {opener}* to the next{'' if count == 1 else f' {count}'}:")
    total = total_finish = 0
    for r in order[first:last]:
        s, f = statistics.median(slot[r[2]]), statistics.median(finish[r[2]])
        total, total_finish = total + s, total_finish + f
        print(f"    {r[3][:60]:60s} dur {statistics.median(dur[r[2]]) / 1e3:6.2f} us  slot {s / 1e3:6.2f} us"
              f"  finish {f / 1e3:6.2f} us")
    print(f"    {'layer':60s} {'':17s} {total / 1e3:6.2f} us  {'':7s}{total_finish / 1e3:6.2f} us")


if __name__ == "__main__":
    main()
