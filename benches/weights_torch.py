"""safetensors.torch.load_file(device="cuda") on weights_load.cpp's file, hot and cold page cache,
timed to torch.cuda.synchronize(), every load checked. Exit 3 no torch/safetensors/CUDA, 1 bad data.
    python3 benches/weights_torch.py --file F [--modes hot,cold] [--reps N] [--csv OUT] [--ours-csv CSV]
"""
import argparse
import csv
import os
import statistics
import sys
import time

from bench_common import import_torch

LOADER = 'torch: safetensors.torch.load_file(device="cuda")'


def evict(path):
    """Drops the file's pages from the page cache (the file is synced, so they are clean)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    """Reads the whole file into the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def medians(rows, loader):
    """{cache: median seconds} of `loader`'s rows of a weights_load/weights_torch CSV."""
    by = {}
    for r in rows:
        if r["loader"] == loader:
            by.setdefault(r["cache"], []).append(float(r["seconds"]))
    return {c: statistics.median(v) for c, v in by.items()}


def table(torch_rows, ours_rows):
    """The Markdown rows of torch's loads, with ours' speed-up over each when ours was measured."""
    ours = medians(ours_rows, "ours")
    out = ["| loader | page cache | seconds per model | GB/s | ours vs it | spread |", "|---|---|--:|--:|--:|--:|"]
    by = {}
    for r in torch_rows:
        by.setdefault(r["cache"], []).append(r)
    for cache in ("hot", "cold"):
        rs = by.get(cache)
        if not rs:
            continue
        secs = sorted(float(r["seconds"]) for r in rs)
        m = statistics.median(secs)
        gbs = int(rs[0]["bytes"]) / m / 1e9
        q = statistics.quantiles(secs, n=4) if len(secs) > 1 else [m, m, m]
        ratio = f"{m / ours[cache]:.2f}x" if cache in ours else "-"
        out.append(f"| {LOADER} | {cache} | {m:.3f} | {gbs:.1f} GB/s | {ratio} | {(q[2] - q[0]) / m * 100:.0f}% |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--modes", default="hot,cold")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--csv")
    ap.add_argument("--ours-csv")
    a = ap.parse_args(argv)
    torch = import_torch("weights_torch", "safetensors.torch")
    if torch is None:
        return 3
    from safetensors.torch import load_file
    # The tensors' bytes (the file less its header), as weights_load counts them.
    with open(a.file, "rb") as f:
        size = os.path.getsize(a.file) - 8 - int.from_bytes(f.read(8), "little")
    rows, ok = [], True
    for cache in ("hot", "cold"):
        if cache not in a.modes.split(","):
            continue
        if cache == "hot":
            warm(a.file)
        for r in range(a.reps):
            if cache == "cold":
                evict(a.file)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loaded = load_file(a.file, device="cuda")
            torch.cuda.synchronize()
            sec = time.perf_counter() - t0
            # The check, not timed: every tensor's bits against the file read on the host (as
            # 16-bit integers, so that random NaN patterns compare equal to themselves).
            host = load_file(a.file, device="cpu")
            bad = [k for k in host if not torch.equal(loaded[k].cpu().view(torch.int16), host[k].view(torch.int16))]
            if set(host) != set(loaded) or bad:
                ok = False
                print(f"DATA CHECK FAILED (torch {cache} load {r}): {(bad or ['tensor names'])[0]}", file=sys.stderr)
            del loaded, host
            torch.cuda.empty_cache()
            rows.append({"loader": LOADER, "cache": cache, "seconds": f"{sec:.9f}", "bytes": str(size)})
            print(f"weights_torch: {cache} {sec:.3f} s ({size / sec / 1e9:.1f} GB/s)", file=sys.stderr)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["loader", "cache", "seconds", "bytes"])
            w.writeheader()
            w.writerows(rows)
    ours_rows = []
    if a.ours_csv:
        with open(a.ours_csv, newline="") as f:
            ours_rows = list(csv.DictReader(f))
    print(f"\n### torch {torch.__version__}\n")
    print(table(rows, ours_rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
