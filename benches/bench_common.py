"""What the benchmarks' Python tools share: table_bench's number formats, median, --only, torch import."""

import importlib
import math
import sys

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _fixed(v, unit, sep=" "):
    """Three significant digits, as bench_util.hpp prints them."""
    if v >= 100:
        return "%.0f%s%s" % (v, sep, unit)
    if v >= 10:
        return "%.1f%s%s" % (v, sep, unit)
    return "%.2f%s%s" % (v, sep, unit)


def fmt_time(s):
    if s != s:
        return "n/a"
    if s < 1e-6:
        return _fixed(s * 1e9, "ns")
    if s < 1e-3:
        return _fixed(s * 1e6, "us")
    if s < 1.0:
        return _fixed(s * 1e3, "ms")
    return _fixed(s, "s")


def fmt_gbs(gbs):
    return "n/a" if gbs != gbs else _fixed(gbs, "GB/s")


def fmt_ratio(r):
    return "n/a" if r != r or math.isinf(r) else _fixed(r, "x", sep="")


def fmt_size(n):
    """"4 KiB", "1 MiB", "1 GiB", or bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def median(v):
    s = sorted(v)
    if not s:
        return float("nan")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def only_matches(only, name):
    """--only as table_bench reads it: name contains TEXT or one of its '|'-separated parts."""
    return not only or any(p in name for p in only.split("|") if p)


def import_torch(program, *also):
    """torch (and imports `also`), or None, said on stderr, when one of them or CUDA is unavailable."""
    try:
        import torch
        for name in also:
            importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure means: not measured
        print("%s: %s unavailable: %s: %s" % (program, " or ".join(("torch",) + also), type(e).__name__, e),
              file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("%s: torch %s sees no CUDA device" % (program, torch.__version__), file=sys.stderr)
        return None
    return torch
