#!/usr/bin/env python3
"""bench_merge: adds torch_bench's "torch" and "static vs torch" (torch time / ours static) columns
to table_bench's Markdown table, and a paragraph below it (or one line saying why there is none).
    python3 bench_merge.py --table bench.md --samples bench-samples.csv --torch torch.csv [-o OUT]
Exit: 0 merged (or the reason noted); 2 bad input.
"""

import argparse
import csv
import os
import sys

from bench_common import fmt_gbs, fmt_ratio, fmt_time, median

TORCH_COL, TORCH_RATIO_COL = "torch", "static vs torch"


# ---- inputs ----------------------------------------------------------------------------------------
def read_samples(path):
    """(rows, comments) of a table_bench-format CSV: rows[(workload, backend)] = (unit, bytes,
    [seconds per op]); comment lines ('# ...') returned in order without the '# '."""
    rows, comments = {}, []
    with open(path, newline="") as f:
        lines = []
        for line in f:
            if line.startswith("#"):
                comments.append(line[1:].strip())
            elif line.strip():
                lines.append(line)
    reader = csv.DictReader(lines)
    need = {"workload", "backend", "unit", "bytes", "seconds_per_op"}
    if reader.fieldnames is None:
        return rows, comments
    if not need <= set(reader.fieldnames):
        raise ValueError("%s: header %s lacks %s" % (path, reader.fieldnames, sorted(need - set(reader.fieldnames))))
    for r in reader:
        samples = [float(x) for x in r["seconds_per_op"].split(";") if x.strip()]
        rows[(r["workload"], r["backend"])] = (r["unit"], float(r["bytes"] or 0), samples)
    return rows, comments


def split_row(line):
    """The cells of a Markdown pipe-table line."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def join_row(cells):
    return "|" + "".join(" %s |" % c for c in cells)


def find_table(lines):
    """(header index, last row index) of the table whose first column is 'workload'."""
    for i, line in enumerate(lines):
        if line.startswith("|") and split_row(line)[:1] == ["workload"]:
            if i + 1 >= len(lines) or not lines[i + 1].startswith("|"):
                break
            end = i + 1
            while end + 1 < len(lines) and lines[end + 1].startswith("|"):
                end += 1
            return i, end
    raise ValueError("no table with a 'workload' column")


def merge(md_text, ours, torch_rows, torch_comments, torch_note=None):
    """Returns md_text with the torch columns and the paragraph about them."""
    lines = md_text.split("\n")
    head, end = find_table(lines)
    header = split_row(lines[head])
    if TORCH_COL in header:
        raise ValueError("the table already has a torch column")
    for col in ("raw", "static vs ref"):
        if col not in header:
            raise ValueError("the table has no '%s' column" % col)
    at_torch = header.index("raw") + 1
    at_ratio = header.index("static vs ref") + 2  # after the torch column went in

    table_names = set()
    out_rows = []
    for i in range(head, end + 1):
        cells = split_row(lines[i])
        if i == head:
            cells.insert(at_torch, TORCH_COL)
            cells.insert(at_ratio, TORCH_RATIO_COL)
        elif i == head + 1:
            cells.insert(at_torch, "--:")
            cells.insert(at_ratio, "--:")
        else:
            name = cells[0]
            table_names.add(name)
            cell, ratio = "-", "-"
            t = torch_rows.get((name, "torch"))
            if t:
                unit, nbytes, samples = t
                tm = median(samples)
                cell = fmt_gbs(nbytes / tm / 1e9) if unit == "bandwidth" else fmt_time(tm)
                o = ours.get((name, "ours static"))
                ratio = fmt_ratio(tm / median(o[2])) if o and o[2] else "n/a"
            cells.insert(at_torch, cell)
            cells.insert(at_ratio, ratio)
        out_rows.append(join_row(cells))

    info = [c[len("info:"):].strip() for c in torch_comments if c.startswith("info:")]
    skipped = [c[len("skipped:"):].strip() for c in torch_comments if c.startswith("skipped:")]
    failures = [c[len("failure:"):].strip() for c in torch_comments if c.startswith("failure:")]
    elapsed = [c[len("elapsed_s:"):].strip() for c in torch_comments if c.startswith("elapsed_s:")]
    measured = sorted({name for (name, backend) in torch_rows if backend == "torch"})
    unmatched = [n for n in measured if n not in table_names]
    matched = len(measured) - len(unmatched)

    para = ["torch column: %s, measured by benches/torch_bench.py in its own process right after "
            "table_bench (not interleaved with the four columns): the same operations at the same sizes "
            "through Python (torch.empty on the device or with pin_memory=True, then del; Tensor.copy_, "
            "non_blocking=False for memcpy_sync rows, non_blocking=True + stream synchronize for "
            "memcpy_async rows; below 1 GiB alternating between two sets of pinned and device tensors, as "
            "table_bench does), medians of repetitions of host time; static vs torch = torch time / ours "
            "(> 1: ours better). %d rows matched%s." % (
                info[0] if info else "torch (version not recorded)", matched,
                ", torch ran %s s" % elapsed[0] if elapsed else "")]
    if torch_note:
        para.append(torch_note)
    if unmatched:
        para.append("torch rows without a table row: %s." % "; ".join("`%s`" % n for n in unmatched))
    if skipped:
        para.append("torch rows skipped (its time budget spent): %s." % "; ".join("`%s`" % n for n in skipped))
    text = "\n".join(lines[:head] + out_rows)
    rest = "\n".join(lines[end + 1:])
    text += "\n\n" + " ".join(para) + "\n"
    for f in failures:
        text += "\n**DATA CHECK FAILED** (torch): %s\n" % f
    return text + ("\n" + rest.lstrip("\n") if rest.strip() else rest)


def note_only(md_text, reason):
    """md_text with one line after the table saying why there is no torch column."""
    lines = md_text.split("\n")
    try:
        _, end = find_table(lines)
    except ValueError:
        return md_text.rstrip("\n") + "\n\ntorch column: not measured (%s).\n" % reason
    rest = "\n".join(lines[end + 1:])
    return ("\n".join(lines[:end + 1]) + "\n\ntorch column: not measured (%s).\n" % reason +
            ("\n" + rest.lstrip("\n") if rest.strip() else rest))


TORCH_RC = {
    1: "a torch data check failed",
    2: "torch_bench: bad usage",
    3: "torch or its CUDA device unavailable in this python3",
    124: "torch_bench ran past its time limit and was killed",
    137: "torch_bench ran past its time limit and was killed",
}


def main(argv=None):
    p = argparse.ArgumentParser(description="Adds the torch column to table_bench's Markdown table.")
    p.add_argument("--table", required=True, help="table_bench's bench.md")
    p.add_argument("--samples", required=True, help="table_bench's samples CSV (--csv)")
    p.add_argument("--torch", required=True, help="torch_bench's CSV")
    p.add_argument("--torch-rc", type=int, default=0, help="torch_bench's exit code, for the note")
    p.add_argument("-o", "--out", help="output file (default: overwrite --table)")
    opt = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        with open(opt.table) as f:
            md = f.read()
        torch_rows, torch_comments = ({}, [])
        if os.path.exists(opt.torch):
            torch_rows, torch_comments = read_samples(opt.torch)
        reason = TORCH_RC.get(opt.torch_rc, "torch_bench exited with %d" % opt.torch_rc) if opt.torch_rc else None
        if not torch_rows:
            out = note_only(md, reason or ("%s holds no rows" % opt.torch if os.path.exists(opt.torch)
                                           else "no %s" % opt.torch))
        else:
            ours = read_samples(opt.samples)[0] if os.path.exists(opt.samples) else {}
            note = None
            if opt.torch_rc and opt.torch_rc != 1:
                note = "torch_bench did not finish (%s): the column is partial." % reason
            out = merge(md, ours, torch_rows, torch_comments, note)
    except (OSError, ValueError) as e:
        print("bench_merge: %s" % e, file=sys.stderr)
        return 2
    with open(opt.out or opt.table, "w") as f:
        f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
