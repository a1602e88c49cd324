#!/usr/bin/env python3
"""Summarizes the staged copies of a `LLAISYS_NVIDIA_PAGEABLE_TRACE=1` log per load and size.

    LLAISYS_NVIDIA_PAGEABLE_TRACE=1 weights_load --modes hot --reps 2 OURS.so seed.so 2> trace.log
    python3 benches/trace_summary.py [--link GBPS] [--gap-ms MS] trace.log

Every traced copy (one line each: its direction, bytes, time from start to return and start
time) is read; a pause of more than --gap-ms (50) between one copy's return and the next one's
start begins a new load (weights_load checks a load's data between loads). Per load: its copies,
bytes, the span from the first start to the last return, the time inside copies and between
them, and the bytes' time at --link GB/s (the pinned link; 55.1 by default). Per direction and
size: the copies, the median time from start to return, the GB/s of all of them, and the median
and total time from the previous copy's return to its start. Per load, the host threads: the
bytes over their summed copy time (`busy`: the rate of one thread), their summed time waiting
for a chunk to be ready (`waited`), how many of the pool's threads slept when a copy was handed
to them (`asleep`), and how long after that the last of them joined it (`joined_last`), median
and 90th percentile. Trace every copy (=1): with every N-th, the spans and gaps mean nothing.
Standard library only.
"""

import argparse
import math
import re
import statistics
import sys

LINE = re.compile(
    r"llaisys-nvidia pageable trace: (HostToDevice|DeviceToHost) (\d+) B, \d+ chunks?,.*?: "
    r"([\d.]+) us, from ([\d.]+) us")


THREADS = {
    "busy": re.compile(r"; busy\d+ =([\d.]+) us"),
    "waited": re.compile(r"; waited\d+ =([\d.]+) us"),
    "asleep": re.compile(r"; asleep(\d+) @([\d.]+)"),
    "joined_last": re.compile(r"; joined_last\d+ @([\d.]+)"),
}


def threads_of(line):
    """The host threads' marks of one trace line: busy and waited us (summed over threads), the
    threads asleep and when they were handed the copy, when the last one joined (us since the
    copy's start); None where the line has none."""
    m = {k: r.search(line) for k, r in THREADS.items()}
    return {
        "busy": float(m["busy"].group(1)) if m["busy"] else None,
        "waited": float(m["waited"].group(1)) if m["waited"] else None,
        "asleep": int(m["asleep"].group(1)) if m["asleep"] else None,
        "handed": float(m["asleep"].group(2)) if m["asleep"] else None,
        "joined_last": float(m["joined_last"].group(1)) if m["joined_last"] else None,
    }


def parse(lines):
    """[(direction, bytes, start us, duration us, threads_of)] of the trace lines, in start
    order."""
    out = []
    for line in lines:
        m = LINE.search(line)
        if m:
            out.append((m.group(1), int(m.group(2)), float(m.group(4)), float(m.group(3)),
                        threads_of(line)))
    return sorted(out, key=lambda c: c[2])


def percentile(values, q):
    """The q-th percentile (nearest rank) of a non-empty list."""
    v = sorted(values)
    return v[min(len(v), max(1, math.ceil(q / 100.0 * len(v)))) - 1]


def threads_summary(load):
    """The markdown line of a load's host threads, or None when its lines carry no marks."""
    busy = [(c[1], c[4]["busy"]) for c in load if c[4]["busy"] is not None]
    if not busy:
        return None
    busy_us = sum(b for _, b in busy)
    rate = sum(n for n, _ in busy) / busy_us / 1e3 if busy_us > 0 else 0.0
    waited = sum(c[4]["waited"] or 0.0 for c in load)
    asleep = [c[4]["asleep"] for c in load if c[4]["asleep"] is not None]
    joins = [c[4]["joined_last"] - c[4]["handed"] for c in load
             if c[4]["joined_last"] is not None and c[4]["handed"] is not None]
    line = ("- host threads: %.2f GB/s per thread copying (bytes over their summed copy time), "
            "%.1f ms in all waiting for chunks" % (rate, waited / 1e3))
    if asleep:
        line += "; %.1f of the pool's threads asleep when handed a copy (mean of %d copies)" % (
            statistics.mean(asleep), len(asleep))
    if joins:
        line += "; the last joined %.1f us after (median), %.1f us (90th percentile)" % (
            statistics.median(joins), percentile(joins, 90))
    return line


def loads(copies, gap_us):
    """The copies split where one copy's return and the next one's start lie over gap_us apart."""
    out = []
    for c in copies:
        if not out or c[2] - (out[-1][-1][2] + out[-1][-1][3]) > gap_us:
            out.append([])
        out[-1].append(c)
    return out


def summary(load, link_gbs):
    """Markdown lines of one load."""
    span = load[-1][2] + load[-1][3] - load[0][2]
    inside = sum(c[3] for c in load)
    nbytes = sum(c[1] for c in load)
    lines = [
        "- %d copies, %.3f GB: span %.1f ms, in copies %.1f ms, between them %.1f ms; the bytes at "
        "%.1f GB/s: %.1f ms" % (len(load), nbytes / 1e9, span / 1e3, inside / 1e3, (span - inside) / 1e3,
                               link_gbs, nbytes / link_gbs / 1e6),
    ]
    threads = threads_summary(load)
    if threads:
        lines.append(threads)
    lines += [
        "",
        "| direction | bytes | copies | time per copy (median) | GB/s | time before it (median) | "
        "time before them (total) |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    groups = {}
    for i, c in enumerate(load):
        before = c[2] - (load[i - 1][2] + load[i - 1][3]) if i else 0.0
        groups.setdefault((c[0], c[1]), []).append((c[3], before))
    for (direction, size), g in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        times = [t for t, _ in g]
        befores = [b for _, b in g]
        gbs = size * len(g) / sum(times) / 1e3 if sum(times) > 0 else 0.0
        lines.append("| %s | %d | %d | %.1f us | %.1f | %.1f us | %.2f ms |" % (
            direction, size, len(g), statistics.median(times), gbs, statistics.median(befores),
            sum(befores) / 1e3))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="stderr of a run with LLAISYS_NVIDIA_PAGEABLE_TRACE=1")
    ap.add_argument("--link", type=float, default=55.1, help="the pinned link's GB/s (55.1)")
    ap.add_argument("--gap-ms", type=float, default=50.0, help="a pause that begins a new load (50)")
    a = ap.parse_args(argv)
    if a.link <= 0 or a.gap_ms <= 0:
        ap.error("--link and --gap-ms must be positive")
    with open(a.log, errors="replace") as f:
        copies = parse(f)
    if not copies:
        print("trace_summary: no pageable trace lines in %s (run with LLAISYS_NVIDIA_PAGEABLE_TRACE=1)" % a.log,
              file=sys.stderr)
        return 1
    for k, load in enumerate(loads(copies, a.gap_ms * 1e3)):
        print("### Load %d\n" % (k + 1))
        print("\n".join(summary(load, a.link)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
