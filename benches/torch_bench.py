#!/usr/bin/env python3
"""torch_bench: the torch column of table_bench (docs/benchmark.md): the same rows at the same sizes
through torch's caching allocator and Tensor.copy_ (non_blocking=False: memcpy_sync; True + stream
synchronize: memcpy_async), Python loops, medians of host time; every copy checked once per row.
    python3 torch_bench.py --csv torch.csv [--quick] [--only TEXT] [--budget-s S]
Exit: 0 measured; 1 a data check failed; 2 bad usage; 3 torch or its CUDA device unavailable.
"""

import argparse
import sys
import time

from bench_common import GiB, KiB, MiB, fmt_size, import_torch, median, only_matches

# The sizes and variants of table_bench's copy rows (benches/table_bench.cpp), H2H left out.
COPY_SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB]
COPY_SIZE_FULL = 1 * GiB
VARIANTS = ["H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable", "D2D"]
ALLOC_SIZES = [1 * KiB, 1 * MiB, 64 * MiB]
ROUND_TRIP = 4 * MiB
NOWAIT_NAME = "memcpy_sync D2D 4 KiB host time, no wait"
# A pattern period that is no power of two, so that an offset error shows.
PATTERN_PERIOD = 1048573


def copy_name(variant, is_async, size):
    return "%s %s %s" % ("memcpy_async" if is_async else "memcpy_sync", variant, fmt_size(size))


def alloc_name(host, size):
    what = "malloc_host+free_host" if host else "malloc_device+free_device"
    return "%s %s" % (what, fmt_size(size) if size else "992 KiB..1 MiB (fits cached)")


def varying(k):
    """Sizes a cached 1 MiB block fits: 1 MiB, 1020 KiB, ..., 992 KiB, in turn."""
    return 1 * MiB - (k & 7) * 4 * KiB


def row_names(quick=False):
    """Every row this program can measure, in the order it measures them."""
    names = [alloc_name(h, s) for h in (0, 1) for s in ALLOC_SIZES + [0]]
    names += ["free_device 1 MiB, cached block (free only)", "free_host 1 MiB, cached block (free only)"]
    names += ["memcpy_async 64 B H2D pinned, enqueue only", "memcpy_async 64 B D2D, enqueue only"]
    names += ["tensor round trip 4 MiB (malloc, H2D+D2H pageable, free)"]
    for size in copy_sizes(quick):
        names += [copy_name(v, a, size) for v in VARIANTS for a in (False, True)]
        if size == 4 * KiB:
            names.append(NOWAIT_NAME)
    return names


def copy_sizes(quick):
    return COPY_SIZES + ([] if quick else [COPY_SIZE_FULL])


class Bench:
    """Calibration, repetitions and the CSV, as table_bench's Runner does it for one backend."""

    def __init__(self, opt, csv_file):
        self.opt = opt
        self.csv = csv_file
        self.start = time.perf_counter()
        self.rows = 0
        self.skipped = []
        self.failures = []

    def wanted(self, name):
        return only_matches(self.opt.only, name)

    def out_of_time(self):
        return time.perf_counter() - self.start > self.opt.budget_s

    def comment(self, text):
        self.csv.write("# %s\n" % text)
        self.csv.flush()

    def fail(self, what):
        if what not in self.failures:
            self.failures.append(what)
            print("torch_bench: DATA CHECK FAILED: %s" % what, file=sys.stderr)
            self.comment("failure: %s" % what)

    def measure(self, name, unit, nbytes, fn, reps=11, min_rep_s=2e-3, max_n=1 << 20):
        """fn(n) runs the operation n times and returns the seconds of the part that is timed."""
        if not self.wanted(name):
            return
        if self.out_of_time():
            self.skipped.append(name)
            self.comment("skipped: %s" % name)
            return
        reps = max(3, int(round(reps * self.opt.reps_scale)))
        if self.opt.quick:
            min_rep_s = min(min_rep_s, 1e-3)
        n = 1
        fn(n)  # warm-up: the first use may fill a cache
        t = fn(n)
        for _ in range(24):
            if n >= max_n or t >= min_rep_s:
                break
            grow = min_rep_s / t * 1.25 if t > 1e-7 else 16.0
            grow = min(64.0, max(2.0, grow))
            n = min(max_n, int(n * grow))
            t = fn(n)
        samples = [fn(n) / n for _ in range(reps)]
        self.csv.write('"%s",torch,%s,%.0f,%d,%s\n' % (name, unit, nbytes, n, ";".join("%.6e" % x for x in samples)))
        self.csv.flush()
        self.rows += 1
        m = median(samples)
        shown = "%.3g GB/s" % (nbytes / m / 1e9) if unit == "bandwidth" else "%.3g us" % (m * 1e6)
        print("  %-56s %12s  (n=%d)" % (name, shown, n), file=sys.stderr)


def parse(argv):
    p = argparse.ArgumentParser(description="The torch column of the table benchmark (docs/benchmark.md).")
    p.add_argument("--csv", help="write the samples to this file (default: stdout)")
    p.add_argument("--quick", action="store_true", help="3 repetitions, no 1 GiB copies, 1 ms repetitions")
    p.add_argument("--only", default="", help="only rows whose name contains TEXT (A|B: either)")
    p.add_argument("--reps-scale", type=float, default=1.0, help="multiply every repetition count by X")
    p.add_argument("--budget-s", type=float, default=90.0, help="start no new row after S seconds")
    p.add_argument("--list", action="store_true", help="print the row names and exit (needs no torch)")
    opt = p.parse_args(argv)
    if opt.quick:
        opt.reps_scale *= 3.0 / 11.0
    if not opt.reps_scale > 0:
        p.error("--reps-scale must be positive")
    return opt


def pattern(torch, n, seed, **kw):
    """A CPU tensor of n non-zero bytes (every page written), pinned when kw says so."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randint(1, 256, (min(n, PATTERN_PERIOD),), dtype=torch.uint8, generator=gen)
    t = torch.empty(n, dtype=torch.uint8, **kw)
    for off in range(0, n, PATTERN_PERIOD):
        k = min(PATTERN_PERIOD, n - off)
        t[off:off + k].copy_(base[:k])
    return t


def same(torch, a, b):
    """Byte equality of two uint8 tensors, on the CPU."""
    return torch.equal(a.cpu(), b.cpu())


def run(torch, opt, csv_file):
    dev = torch.device("cuda", 0)
    cur = torch.cuda.current_stream
    B = Bench(opt, csv_file)
    B.comment("info: torch %s, CUDA %s, device %s, python %s" % (
        torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), sys.version.split()[0]))
    csv_file.write("workload,backend,unit,bytes,n_per_rep,seconds_per_op\n")
    torch.empty(1, dtype=torch.uint8, device=dev)  # context and allocator
    torch.cuda.synchronize()

    # ---- the caching allocators: torch.empty + del -----------------------------------------------
    for host in (0, 1):
        for size in ALLOC_SIZES + [0]:
            kw = {"pin_memory": True} if host else {"device": dev}

            def pair(n, size=size, kw=kw):
                t0 = time.perf_counter()
                for k in range(n):
                    x = torch.empty(size or varying(k), dtype=torch.uint8, **kw)
                    del x
                return time.perf_counter() - t0
            B.measure(alloc_name(host, size), "latency", 0, pair, reps=5 if host and size == 64 * MiB else 11,
                      max_n=1 << 16)

    # ---- free alone: blocks made with the clock stopped, dropped with it running ----------------
    for host in (0, 1):
        batch = 64 if host else 256
        kw = {"pin_memory": True} if host else {"device": dev}

        def free_only(n, batch=batch, kw=kw):
            t, done = 0.0, 0
            while done < n:
                k = min(batch, n - done)
                blocks = [torch.empty(MiB, dtype=torch.uint8, **kw) for _ in range(k)]
                t0 = time.perf_counter()
                blocks.clear()
                t += time.perf_counter() - t0
                done += k
            return t
        name = "free_host 1 MiB, cached block (free only)" if host else "free_device 1 MiB, cached block (free only)"
        B.measure(name, "latency", 0, free_only, max_n=1 << 16)

    # ---- enqueue only: 64 B copy_ with non_blocking=True, the clock stops before the wait -------
    d64 = torch.empty(4 * KiB, dtype=torch.uint8, device=dev)
    h64 = pattern(torch, 4 * KiB, 7, pin_memory=True)
    for name, dst, src in (("memcpy_async 64 B H2D pinned, enqueue only", d64[:64], h64[:64]),
                           ("memcpy_async 64 B D2D, enqueue only", d64[2048:2112], d64[:64])):
        def enqueue(n, dst=dst, src=src):
            t0 = time.perf_counter()
            for _ in range(n):
                dst.copy_(src, non_blocking=True)
            t = time.perf_counter() - t0
            cur().synchronize()
            return t
        B.measure(name, "latency", 0, enqueue, max_n=256)

    # ---- the llaisys tensor round trip: empty, copy_ in and out of pageable memory, del --------
    name = "tensor round trip 4 MiB (malloc, H2D+D2H pageable, free)"
    if B.wanted(name):
        src = pattern(torch, ROUND_TRIP, 11)
        back = torch.empty(ROUND_TRIP, dtype=torch.uint8)

        def trip(n):
            back.fill_(0x3C)
            t0 = time.perf_counter()
            for _ in range(n):
                d = torch.empty(ROUND_TRIP, dtype=torch.uint8, device=dev)
                d.copy_(src)
                back.copy_(d)
                del d
            t = time.perf_counter() - t0
            if not torch.equal(src, back):
                B.fail("torch: tensor round trip data differ")
            return t
        B.measure(name, "latency", 0, trip)
        del src, back

    # ---- copy_ for each kind, pinned and pageable, by size ------------------------------------
    for size in copy_sizes(opt.quick):
        names = [copy_name(v, a, size) for v in VARIANTS for a in (False, True)]
        nowait = size == 4 * KiB and B.wanted(NOWAIT_NAME)
        if not any(B.wanted(x) for x in names) and not nowait:
            continue
        if B.out_of_time():
            for x in names + ([NOWAIT_NAME] if nowait else []):
                if B.wanted(x):
                    B.skipped.append(x)
                    B.comment("skipped: %s" % x)
            continue
        pA, pB = pattern(torch, size, 41), pattern(torch, size, 42)
        # As table_bench: below 1 GiB copy k of a repetition uses buffer set k mod 2.
        sets = []
        for k in range(2 if size < GiB else 1):
            hA = pattern(torch, size, 43 + 2 * k, pin_memory=True)
            hB = pattern(torch, size, 44 + 2 * k, pin_memory=True)
            if not (hA.is_pinned() and hB.is_pinned()):
                B.fail("torch: pin_memory=True tensors of %s are not pinned" % fmt_size(size))
            dA = torch.empty(size, dtype=torch.uint8, device=dev)
            dB = torch.empty(size, dtype=torch.uint8, device=dev)
            dA.copy_(pA)
            dB.copy_(pB)
            sets.append({"H2D pinned": (dA, hA), "H2D pageable": (dA, pA), "D2H pinned": (hB, dB),
                         "D2H pageable": (pB, dB), "D2D": (dB, dA)})
        for v in VARIANTS:
            pairs = [ends[v] for ends in sets]
            for is_async in (False, True):
                name = copy_name(v, is_async, size)
                if not B.wanted(name):
                    continue
                for dst, src in pairs:
                    dst.fill_(0x5A)
                    dst.copy_(src, non_blocking=is_async)
                    torch.cuda.synchronize()
                    if not same(torch, dst, src):
                        B.fail("torch: %s: destination differs from source" % name)

                if is_async:
                    def op(n, pairs=pairs):
                        m = len(pairs)
                        t0 = time.perf_counter()
                        for k in range(n):
                            dst, src = pairs[k % m]
                            dst.copy_(src, non_blocking=True)
                            cur().synchronize()
                        return time.perf_counter() - t0
                else:
                    def op(n, pairs=pairs):
                        m = len(pairs)
                        t0 = time.perf_counter()
                        for k in range(n):
                            dst, src = pairs[k % m]
                            dst.copy_(src)
                        # as table_bench's memcpy_sync rows: one device wait per repetition
                        torch.cuda.synchronize()
                        return time.perf_counter() - t0
                B.measure(name, "bandwidth", size, op, reps=5 if size >= GiB else 9, max_n=1 << 16)
        if nowait:
            def host_time(n, pairs=[ends["D2D"] for ends in sets]):
                m = len(pairs)
                t0 = time.perf_counter()
                for k in range(n):
                    dst, src = pairs[k % m]
                    dst.copy_(src)
                t = time.perf_counter() - t0
                torch.cuda.synchronize()
                return t
            B.measure(NOWAIT_NAME, "latency", 0, host_time, max_n=256)
        del pA, pB, hA, hB, dA, dB, sets

    torch.cuda.synchronize()
    elapsed = time.perf_counter() - B.start
    B.comment("elapsed_s: %.1f" % elapsed)
    print("torch_bench: %d rows in %.0f s%s" % (B.rows, elapsed, ", %d skipped (time budget)" % len(B.skipped)
                                                if B.skipped else ""), file=sys.stderr)
    return 1 if B.failures else 0


def main(argv=None):
    opt = parse(sys.argv[1:] if argv is None else argv)
    if opt.list:
        for name in row_names(opt.quick):
            if only_matches(opt.only, name):
                print(name)
        return 0
    torch = import_torch("torch_bench")
    if torch is None:
        return 3
    out = open(opt.csv, "w") if opt.csv else sys.stdout
    try:
        return run(torch, opt, out)
    finally:
        if opt.csv:
            out.close()


if __name__ == "__main__":
    sys.exit(main())
