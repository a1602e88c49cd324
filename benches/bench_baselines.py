#!/usr/bin/env python3
"""Two baselines side by side (scripts/gpu-bench.sh --baselines): from the samples CSV of one
table_bench run whose "ours static" column measured one baseline and whose "reference" column
measured another (table_bench --getters), each row's medians and their ratio, and whether every
row is within the tolerance; where the "ours dynamic" column measured a second copy of the first
baseline, that pair's ratio too (the run's A/A: how far two equal backends drift apart) (our baseline should be within 3% of seed_runtime.cu, the earlier
reference, so that figures measured against either stay comparable).

Exit 0 every row within the tolerance, 1 some row not, 2 no row with both columns."""

import argparse
import sys

from bench_common import fmt_gbs, fmt_ratio, fmt_time, median
from bench_merge import read_samples

FIRST, SECOND, COPY = "ours static", "reference", "ours dynamic"


def compare(rows, tolerance):
    """[(workload, first cell, second cell, first time / second time, within, A/A ratio or None)] of
    rows in both columns."""
    out = []
    for (name, backend), (unit, nbytes, samples) in rows.items():
        if backend != FIRST or (name, SECOND) not in rows:
            continue
        a, b = median(samples), median(rows[(name, SECOND)][2])
        if not (a > 0 and b > 0):
            continue

        def cell(s):
            return fmt_gbs(nbytes / s / 1e9) if unit == "bandwidth" and nbytes else fmt_time(s)

        ratio = a / b
        copy = rows.get((name, COPY))
        aa = a / median(copy[2]) if copy and median(copy[2]) > 0 else None
        out.append((name, cell(a), cell(b), ratio, abs(ratio - 1) <= tolerance, aa))
    return out


def table(compared, first, second, tolerance):
    lines = ["| workload | %s | %s | time ratio (%s / %s) | within %g%% | A/A (%s / its copy) |" % (
        first, second, first, second, tolerance * 100, first), "|---|--:|--:|--:|---|--:|"]
    for name, a, b, ratio, within, aa in compared:
        lines.append("| %s | %s | %s | %s | %s | %s |" % (name, a, b, fmt_ratio(ratio), "yes" if within else "NO",
                                                      "-" if aa is None else fmt_ratio(aa)))
    outside = [c for c in compared if not c[4]]
    lines.append("")
    lines.append("%s within %g%% of %s on %d of %d rows%s" % (
        first, tolerance * 100, second, len(compared) - len(outside), len(compared),
        "" if not outside else "; outside: " + ", ".join("`%s` (%s)" % (c[0], fmt_ratio(c[3])) for c in outside)))
    aas = [c[5] for c in compared if c[5] is not None]
    if aas:
        lines.append("A/A over the same rows: %s to %s" % (fmt_ratio(min(aas)), fmt_ratio(max(aas))))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", required=True, help="table_bench's --csv file")
    p.add_argument("--tolerance", type=float, default=0.03, help="largest |ratio - 1| (default 0.03)")
    p.add_argument("--first", default="our baseline", help='label of the "ours static" column')
    p.add_argument("--second", default="seed_runtime.cu", help='label of the "reference" column')
    a = p.parse_args(argv)
    rows, _ = read_samples(a.samples)
    compared = compare(rows, a.tolerance)
    if not compared:
        print("bench_baselines: %s has no row measured in both columns" % a.samples, file=sys.stderr)
        return 2
    sys.stdout.write(table(compared, a.first, a.second, a.tolerance))
    return 0 if all(c[4] for c in compared) else 1


if __name__ == "__main__":
    sys.exit(main())
