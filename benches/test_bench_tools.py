#!/usr/bin/env python3
"""Host-only tests of the benchmark's Python tools (no GPU, no torch needed):

    python3 benches/test_bench_tools.py          # or: TABLE_BENCH=/path/to/table_bench python3 ...

- bench_merge.py on synthetic table_bench output (bench.md + samples CSV) and torch CSVs: the
  columns, cells, ratios, notes, and what it does without a torch CSV;
- bench_merge's number formats against cells table_bench printed (docs/benchmark.md's table);
- torch_bench.py run end to end against a small stand-in for torch (byte buffers, no device): the
  rows it writes, that each is one table_bench also has, and that a copy which loses data is
  caught by its data check;
- weights_torch.py's table (medians, GB/s, ours' speed-up from weights_load's CSV) and its stop
  without torch;
- trace_summary.py on a synthetic copy trace: loads split at pauses, each size's medians, GB/s and
  the time before its copies, the host threads' copy rate, waits, sleep and joins;
- torch_bench's row names against `table_bench --list` (TABLE_BENCH, or built here with g++
  against .deps/cuda13 as docs/benchmark.md shows, -Wall -Wextra -Werror);
- table_bench, pageable_probe and alloc_probe built with g++ against the real cudart: without a
  GPU each stops
  with exit code 3 and its message (table_bench loads $LLAISYS_NVIDIA_LIB,
  gpu-stage/static/libllaisys_nvidia.so, or target/release's: run `bash scripts/stage-gpu.sh` or
  `cargo build --release` first; tests/bench_fake.rs runs this file with the test's cdylib);
- pageable_probe built against tests/fixtures/fake_cudart (host memory, an asynchronous copy engine): a
  small run of every part prints every table with no failed data check, and two deliberately
  broken pipelines (a staging buffer reused before its DMA ran; a chunk read before its DMA
  landed) are caught by the probe's data check; alloc_probe built the same way prints every row.
Takes about a minute (six g++ builds).
"""

import contextlib
import csv
import importlib.util
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


merge_mod = load("bench_merge")
torch_bench = load("torch_bench")
weights_torch = load("weights_torch")
trace_summary = load("trace_summary")

BENCH_MD = """## llaisys runtime table benchmark

- 1999-12-31 23:59 UTC, host `vm`
- method: ...

| workload | ours static | ours dynamic | reference | raw | static vs ref | target (static) | result | spread |
|---|--:|--:|--:|--:|--:|--:|--:|--:|
| set_device(0) | 79.1 ns | 92.4 ns | 71.8 ns | 69.3 ns | 0.91x | <= raw +5%/+20 ns | PASS | 12% |
| malloc_device+free_device 1 MiB | 700 ns | 710 ns | 1.95 us | 690 ns (pool) | 2.79x | <= 0.8 us; <= raw +5%/+20 ns | PASS, PASS | 3% |
| memcpy_sync H2D pageable 64 MiB | 50.0 GB/s | 49.0 GB/s | 13.5 GB/s | 13.1 GB/s | 3.70x | >= 48 GB/s; >= 0.98x ref | PASS, PASS | 11% |

Targets (ours static): 5 PASS, 0 MISS, of 5 targets in 3 rows. Run took 60 s.

raw (pool): a note.
"""

SAMPLES = [
    ("set_device(0)", "ours static", "latency", 0, [79.0e-9, 79.1e-9, 79.2e-9]),
    ("malloc_device+free_device 1 MiB", "ours static", "latency", 0, [0.70e-6, 0.69e-6, 0.71e-6]),
    ("malloc_device+free_device 1 MiB", "raw", "latency", 0, [0.69e-6, 0.69e-6, 0.69e-6]),
    ("memcpy_sync H2D pageable 64 MiB", "ours static", "bandwidth", 64 << 20, [64 * 2**20 / 50e9] * 3),
]


def write_samples(path, rows, comments=(), header=True):
    with open(path, "w") as f:
        for c in comments:
            f.write("# %s\n" % c)
        if header:
            f.write("workload,backend,unit,bytes,n_per_rep,seconds_per_op\n")
        for name, backend, unit, nbytes, samples in rows:
            f.write('"%s",%s,%s,%d,10,%s\n' % (name, backend, unit, nbytes, ";".join("%.6e" % x for x in samples)))


def table_rows(md):
    lines = md.split("\n")
    head, end = merge_mod.find_table(lines)
    return [merge_mod.split_row(x) for x in lines[head:end + 1]]


class Formats(unittest.TestCase):
    def test_cells_as_table_bench_prints_them(self):
        f = merge_mod
        for value, text in [(3.24e-9, "3.24 ns"), (222e-9, "222 ns"), (2.13e-6, "2.13 us"), (744e-6, "744 us"),
                            (28.7e-3, "28.7 ms"), (1.5, "1.50 s"), (float("nan"), "n/a")]:
            self.assertEqual(f.fmt_time(value), text)
        for value, text in [(55.04, "55.0 GB/s"), (0.5, "0.50 GB/s"), (1593.2, "1593 GB/s")]:
            self.assertEqual(f.fmt_gbs(value), text)
        for value, text in [(6.16, "6.16x"), (147835.0, "147835x"), (10.04, "10.0x"), (float("inf"), "n/a")]:
            self.assertEqual(f.fmt_ratio(value), text)

    def test_sizes_as_table_bench_names_them(self):
        tb = torch_bench
        self.assertEqual([tb.fmt_size(x) for x in (64, 4096, 65536, 1 << 20, 16 << 20, 1 << 30, 1536)],
                         ["64 B", "4 KiB", "64 KiB", "1 MiB", "16 MiB", "1 GiB", "1536 B"])


class Merge(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench_merge_test")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.md = os.path.join(self.dir, "bench.md")
        self.samples = os.path.join(self.dir, "bench-samples.csv")
        self.torch = os.path.join(self.dir, "torch.csv")
        with open(self.md, "w") as f:
            f.write(BENCH_MD)
        write_samples(self.samples, SAMPLES)

    def run_merge(self, *extra):
        out = os.path.join(self.dir, "out.md")
        rc = merge_mod.main(["--table", self.md, "--samples", self.samples, "--torch", self.torch, "-o", out]
                            + list(extra))
        text = ""
        if os.path.exists(out):
            with open(out) as f:
                text = f.read()
        return rc, text

    def test_columns_cells_and_ratios(self):
        write_samples(self.torch, [
            ("malloc_device+free_device 1 MiB", "torch", "latency", 0, [1.40e-6, 1.39e-6, 1.41e-6, 5e-6]),
            ("memcpy_sync H2D pageable 64 MiB", "torch", "bandwidth", 64 << 20, [64 * 2**20 / 25e9] * 3),
            ("a row table_bench does not have", "torch", "latency", 0, [1e-6]),
        ], comments=["info: torch 2.11.0, CUDA 13.0, device NVIDIA H200, python 3.12.3"])
        with open(self.torch, "a") as f:
            f.write("# skipped: memcpy_sync D2D 1 GiB\n# elapsed_s: 41.5\n")
        rc, text = self.run_merge()
        self.assertEqual(rc, 0)
        rows = table_rows(text)
        self.assertEqual(rows[0], ["workload", "ours static", "ours dynamic", "reference", "raw", "torch",
                                   "static vs ref", "static vs torch", "target (static)", "result", "spread"])
        self.assertEqual(rows[1], ["---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"])
        by_name = {r[0]: r for r in rows[2:]}
        self.assertEqual(len(by_name), 3)
        # no torch row: "-" in both new columns, everything else as it was
        self.assertEqual(by_name["set_device(0)"], ["set_device(0)", "79.1 ns", "92.4 ns", "71.8 ns", "69.3 ns", "-",
                                                    "0.91x", "-", "<= raw +5%/+20 ns", "PASS", "12%"])
        m = by_name["malloc_device+free_device 1 MiB"]
        self.assertEqual(m[4:8], ["690 ns (pool)", "1.41 us", "2.79x", "2.01x"])  # medians 1.405 us / 0.70 us
        self.assertEqual(m[9], "PASS, PASS")
        c = by_name["memcpy_sync H2D pageable 64 MiB"]
        self.assertEqual(c[5], "25.0 GB/s")
        self.assertEqual(c[7], "2.00x")  # torch takes twice our time: ours 2x better
        self.assertIn("torch column: torch 2.11.0, CUDA 13.0, device NVIDIA H200", text)
        self.assertIn("2 rows matched, torch ran 41.5 s.", text)
        self.assertIn("torch rows without a table row: `a row table_bench does not have`.", text)
        self.assertIn("torch rows skipped (its time budget spent): `memcpy_sync D2D 1 GiB`.", text)
        self.assertNotIn("DATA CHECK FAILED", text)
        # the rest of bench.md is kept, in order, after the paragraph
        self.assertLess(text.index("torch column:"), text.index("Targets (ours static): 5 PASS"))
        self.assertLess(text.index("Targets (ours static)"), text.index("raw (pool): a note."))
        self.assertTrue(text.startswith("## llaisys runtime table benchmark\n\n- 1999-12-31 23:59 UTC"))
        # merging twice is refused: the table already has the column
        with open(self.md, "w") as f:
            f.write(text)
        rc, _ = self.run_merge()
        self.assertEqual(rc, 2)

    def test_failures_and_missing_ours(self):
        write_samples(self.torch, [("set_device(0)", "torch", "latency", 0, [2e-6, 2e-6, 2e-6])],
                      comments=["failure: torch: memcpy_sync D2D 4 KiB: destination differs from source"])
        write_samples(self.samples, [])  # no samples of ours: the ratio cannot be computed
        rc, text = self.run_merge("--torch-rc", "1")
        self.assertEqual(rc, 0)
        row = [r for r in table_rows(text) if r[0] == "set_device(0)"][0]
        self.assertEqual(row[5:8], ["2.00 us", "0.91x", "n/a"])
        self.assertIn("**DATA CHECK FAILED** (torch): torch: memcpy_sync D2D 4 KiB: destination differs", text)
        self.assertIn("torch (version not recorded)", text)

    def test_partial_torch_run_is_said(self):
        write_samples(self.torch, [("set_device(0)", "torch", "latency", 0, [2e-6])])
        rc, text = self.run_merge("--torch-rc", "124")
        self.assertEqual(rc, 0)
        self.assertIn("torch_bench did not finish (torch_bench ran past its time limit and was killed)", text)

    def test_without_torch(self):
        rc, text = self.run_merge("--torch-rc", "3")  # no torch.csv at all
        self.assertEqual(rc, 0)
        self.assertEqual(table_rows(text), table_rows(BENCH_MD))
        self.assertIn("torch column: not measured (torch or its CUDA device unavailable in this python3).", text)
        self.assertLess(text.index("torch column:"), text.index("Targets (ours static)"))
        write_samples(self.torch, [], comments=["info: torch 2.11.0"])
        rc, text = self.run_merge()
        self.assertEqual(rc, 0)
        self.assertIn("holds no rows", text)

    def test_bad_input(self):
        with open(self.md, "w") as f:
            f.write("no table here\n")
        write_samples(self.torch, [("set_device(0)", "torch", "latency", 0, [2e-6])])
        self.assertEqual(self.run_merge()[0], 2)
        with open(self.torch, "w") as f:
            f.write("name,value\nx,1\n")
        with open(self.md, "w") as f:
            f.write(BENCH_MD)
        self.assertEqual(self.run_merge()[0], 2)


# ---- a stand-in for the part of torch that torch_bench uses ----------------------------------------
def fake_torch(lose_pageable_h2d=False):
    """Tensors are byte buffers; "cuda" is a label. With lose_pageable_h2d, a copy from pageable
    memory to the device leaves the destination as it was (what the data check must catch)."""
    t = types.ModuleType("torch")
    t.__version__ = "0.0-stub"
    t.version = types.SimpleNamespace(cuda="13.0")
    t.uint8 = "uint8"
    t.calls = {"copy_": 0, "sync": 0}

    class Tensor:
        def __init__(self, mv, device, pinned):
            self.mv, self.device, self.pinned = mv, device, pinned

        def __getitem__(self, sl):
            return Tensor(self.mv[sl], self.device, self.pinned)

        def copy_(self, src, non_blocking=False):
            assert isinstance(non_blocking, bool)
            assert len(self.mv) == len(src.mv), (len(self.mv), len(src.mv))
            t.calls["copy_"] += 1
            if lose_pageable_h2d and self.device == "cuda" and src.device == "cpu" and not src.pinned:
                return self
            self.mv[:] = src.mv
            return self

        def fill_(self, v):
            self.mv[:] = bytes([v]) * len(self.mv)
            return self

        def cpu(self):
            return Tensor(memoryview(bytearray(self.mv)), "cpu", False)

        def is_pinned(self):
            return self.pinned

    def empty(n, dtype=None, device=None, pin_memory=False):
        assert dtype == t.uint8
        dev = "cuda" if device is not None and str(device).startswith("cuda") else "cpu"
        assert not (pin_memory and dev == "cuda")
        return Tensor(memoryview(bytearray(n)), dev, bool(pin_memory))

    class Generator:
        def manual_seed(self, seed):
            self.r = random.Random(seed)
            return self

    def randint(low, high, size, dtype=None, generator=None):
        assert (low, high, dtype) == (1, 256, t.uint8)
        data = generator.r.randbytes(size[0]).replace(b"\x00", b"\x01")
        return Tensor(memoryview(bytearray(data)), "cpu", False)

    def equal(a, b):
        assert a.device == b.device == "cpu"
        return a.mv == b.mv

    def synchronize():
        t.calls["sync"] += 1

    t.Tensor, t.empty, t.Generator, t.randint, t.equal = Tensor, empty, Generator, randint, equal
    t.device = lambda kind, index: "%s:%d" % (kind, index)
    t.cuda = types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda i: "Stub GPU", synchronize=synchronize,
        current_stream=lambda: types.SimpleNamespace(synchronize=synchronize))
    return t


def with_torch(stub, main, args):
    """main(args) with `import torch` giving `stub` (None: failing with ImportError): (its return
    code, what it wrote to stderr)."""
    saved = sys.modules.get("torch")
    sys.modules["torch"] = stub
    err = io.StringIO()
    real_err, sys.stderr = sys.stderr, err
    try:
        rc = main(args)
    finally:
        sys.stderr = real_err
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved
    return rc, err.getvalue()


class TorchBench(unittest.TestCase):
    def run_stub(self, stub, *args):
        out = os.path.join(BUILD, "torch.csv")
        rc, err = with_torch(stub, torch_bench.main, ["--csv", out] + list(args))
        rows, comments = merge_mod.read_samples(out)
        return rc, rows, comments, err

    def test_every_row_written_and_checked(self):
        stub = fake_torch()
        rc, rows, comments, err = self.run_stub(stub, "--quick")
        self.assertEqual(rc, 0, err)
        expected = torch_bench.row_names(quick=True)
        self.assertEqual(sorted(n for n, _ in rows), sorted(expected))
        self.assertEqual(len(expected), 64)  # 1 GiB rows left out by --quick
        for (name, backend), (unit, nbytes, samples) in rows.items():
            self.assertEqual(backend, "torch")
            self.assertEqual(len(samples), 3, name)  # --quick: 3 repetitions
            self.assertTrue(all(s > 0 for s in samples), name)
            self.assertEqual(unit, "bandwidth" if name.startswith("memcpy_") and " B " not in name
                             and "host time" not in name else "latency", name)
            if unit == "bandwidth":
                self.assertEqual(nbytes, [s for s in torch_bench.copy_sizes(True)
                                          if name.endswith(" " + torch_bench.fmt_size(s))][0])
        self.assertTrue(any(c.startswith("info: torch 0.0-stub, CUDA 13.0, device Stub GPU") for c in comments))
        self.assertFalse([c for c in comments if c.startswith("failure:")])
        self.assertGreater(stub.calls["sync"], 0)

    def test_lost_copy_is_caught(self):
        rc, rows, comments, err = self.run_stub(fake_torch(lose_pageable_h2d=True), "--quick", "--only", "H2D pageable 4 KiB")
        self.assertEqual(rc, 1)
        failures = [c for c in comments if c.startswith("failure:")]
        self.assertEqual(failures, ["failure: torch: memcpy_sync H2D pageable 4 KiB: destination differs from source",
                                    "failure: torch: memcpy_async H2D pageable 4 KiB: destination differs from source"])
        self.assertIn("DATA CHECK FAILED", err)
        self.assertEqual(sorted(n for n, _ in rows), ["memcpy_async H2D pageable 4 KiB", "memcpy_sync H2D pageable 4 KiB"])
        # the round trip goes through pageable H2D as well
        rc, _, comments, _ = self.run_stub(fake_torch(lose_pageable_h2d=True), "--quick", "--only", "round trip")
        self.assertEqual(rc, 1)
        self.assertIn("failure: torch: tensor round trip data differ", comments)

    def test_budget_skips_and_says_so(self):
        rc, rows, comments, _ = self.run_stub(fake_torch(), "--quick", "--budget-s", "0", "--only", "D2D")
        self.assertEqual(rc, 0)
        self.assertEqual(rows, {})
        self.assertIn("skipped: memcpy_async 64 B D2D, enqueue only", comments)
        self.assertIn("skipped: memcpy_sync D2D 64 MiB", comments)

    def test_no_torch(self):
        rc, err = with_torch(None, torch_bench.main, ["--csv", os.devnull])
        self.assertEqual(rc, 3)
        self.assertIn("torch_bench: torch unavailable", err)


BUILD = tempfile.mkdtemp(prefix="bench_tools_test")
CUDA = os.path.join(ROOT, ".deps", "cuda13", "nvidia", "cu13")
_built = {}


def build(name, source, cuda=True, shared=False, includes=()):
    """g++ -Wall -Wextra -Werror of one file, against the CUDA 13 wheel's cudart (cuda=True) or
    only the given include folders; cached per name."""
    if name in _built:
        return _built[name]
    out = os.path.join(BUILD, name)
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(ROOT, "csrc")]
    cmd += ["-I" + i for i in includes]
    if cuda:
        cmd += ["-I" + os.path.join(CUDA, "include")]
    if shared:
        cmd += ["-shared", "-fPIC", "-Wl,--exclude-libs,ALL"]
    cmd += ["-x", "c++", source, "-x", "none"]
    if cuda:
        cmd += [os.path.join(CUDA, "lib", "libcudart_static.a"), "-ldl", "-lrt"]
    cmd += ["-lpthread", "-o", out]
    subprocess.run(cmd, check=True)
    _built[name] = out
    return out


def table_bench_binary():
    return os.environ.get("TABLE_BENCH") or build("table_bench", os.path.join(HERE, "table_bench.cpp"))


class WeightsTorch(unittest.TestCase):
    """weights_torch.py's table and its stop without torch (its loads need a GPU)."""

    def rows(self, loader, cache, *seconds):
        return [{"loader": loader, "cache": cache, "seconds": str(s), "bytes": "3500000000"} for s in seconds]

    def test_table_has_medians_speeds_and_ours_ratio(self):
        torch_rows = self.rows(weights_torch.LOADER, "hot", 1.0, 1.4, 1.2) + self.rows(weights_torch.LOADER, "cold", 4.0)
        ours = self.rows("ours", "hot", 0.1, 0.08, 0.12) + self.rows("reference", "hot", 0.5)
        lines = weights_torch.table(torch_rows, ours).splitlines()
        self.assertEqual(len(lines), 4, lines)
        hot = next(line for line in lines if "| hot |" in line)
        cold = next(line for line in lines if "| cold |" in line)
        # median 1.2 s; 3.5 GB / 1.2 s; ours' median 0.1 s: 12x
        self.assertIn("| 1.200 | 2.9 GB/s | 12.00x |", hot)
        # no cold row of ours: no ratio
        self.assertIn("| 4.000 | 0.9 GB/s | - |", cold)
        # without ours' CSV no ratio at all
        self.assertNotIn("x |", weights_torch.table(torch_rows, []))

    def test_no_torch(self):
        rc, err = with_torch(None, weights_torch.main, ["--file", os.devnull])
        self.assertEqual(rc, 3)
        self.assertIn("weights_torch: torch or safetensors unavailable", err)


class Names(unittest.TestCase):
    def test_torch_rows_are_table_rows(self):
        exe = table_bench_binary()
        for quick in (False, True):
            args = [exe, "--list"] + (["--quick"] if quick else [])
            listed = subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()
            table = [line.split("\t")[0] for line in listed]
            self.assertTrue(all(line.count("\t") == 1 for line in listed), listed)
            self.assertEqual(len(table), len(set(table)))
            ours = torch_bench.row_names(quick)
            self.assertEqual(len(ours), len(set(ours)))
            self.assertEqual([n for n in ours if n not in table], [])
            # every copy row of table_bench but H2H has a torch row
            missing = [n for n in table if n.startswith("memcpy_") and "H2H" not in n and n not in ours]
            self.assertEqual(missing, [])
        # --only filters both alike
        listed = subprocess.run([exe, "--list", "--only", "pageable 16 MiB"], check=True, capture_output=True,
                                text=True).stdout.splitlines()
        self.assertEqual(sorted(listed), sorted([
            "memcpy_sync H2D pageable 16 MiB\t>= 40 GB/s; >= 0.98x ref", "memcpy_async H2D pageable 16 MiB\t>= 40 GB/s; >= 0.98x ref",
            "memcpy_sync D2H pageable 16 MiB\t>= 40 GB/s; >= 0.98x ref", "memcpy_async D2H pageable 16 MiB\t>= 40 GB/s; >= 0.98x ref",
            "memcpy_sync H2H pageable 16 MiB\t-", "memcpy_async H2H pageable 16 MiB\t-"]))


FAKE = os.path.join(ROOT, "tests", "fixtures", "fake_cudart")


class NoGpu(unittest.TestCase):
    def test_table_bench_exits_3(self):
        libs = [os.environ.get("LLAISYS_NVIDIA_LIB", ""),
                os.path.join(ROOT, "gpu-stage", "static", "libllaisys_nvidia.so"),
                os.path.join(ROOT, "target", "release", "libllaisys_nvidia.so")]
        ours = [p for p in libs if p and os.path.exists(p)]
        self.assertTrue(ours, "no libllaisys_nvidia.so in %s: run `bash scripts/stage-gpu.sh` first" % libs)
        seed = os.path.join(ROOT, "..", "shared", "reference", "seed_runtime.cu")
        ref = build("libseed_runtime.so", seed, shared=True, includes=[os.path.dirname(seed)])
        r = subprocess.run([table_bench_binary(), ours[0], ours[0], ref], capture_output=True, text=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("table_bench: no CUDA device available (cudaGetDeviceCount: cudaErrorInsufficientDriver (35)",
                      r.stderr)
        self.assertEqual(r.stdout, "")

    def test_probe_exits_3(self):
        exe = build("pageable_probe", os.path.join(HERE, "pageable_probe.cpp"))
        r = subprocess.run([exe, "--quick"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("pageable_probe: no CUDA device available (cudaGetDeviceCount: cudaErrorInsufficientDriver",
                      r.stderr)
        self.assertIn("bash gpu-stage/bench.sh --probe", r.stderr)
        # bad usage is told before the device is looked for
        r = subprocess.run([exe, "--slots", "1"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--slots: '1' is not a value in range", r.stderr)

    def test_alloc_probe_exits_3(self):
        exe = build("alloc_probe", os.path.join(HERE, "alloc_probe.cpp"))
        r = subprocess.run([exe], capture_output=True, text=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("alloc_probe: no CUDA device available", r.stderr)
        r = subprocess.run([exe, "--count", "0"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--count must be positive", r.stderr)


class AllocProbeOnFakeCudart(unittest.TestCase):
    def test_every_way_and_the_copies_print(self):
        exe = build("alloc_probe_fake", os.path.join(HERE, "alloc_probe.cpp"), cuda=False, includes=[FAKE])
        r = subprocess.run([exe, "--count", "8", "--size", "65536"], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        for row, calls in (("one block each", 8), ("four blocks each", 2), ("all in one", 1)):
            self.assertRegex(r.stdout, r"\| 8 x 65536 B, %s \| %d \| [0-9.]+ \| [0-9.]+ \|" % (row, calls))
        self.assertRegex(r.stdout, r"400 x 8 MiB H2D pinned copies, each waited for: [0-9.]+ GB/s alone, [0-9.]+ GB/s "
                                   r"with 8 cudaMallocs of 65536 B on another thread")
        for way in ("cudaHostAlloc, one after another", "cudaHostAlloc, a thread each",
                    "huge pages touched one after another, then cudaHostRegister",
                    "huge pages touched on a thread each, then cudaHostRegister",
                    "4 KiB pages touched one after another, then cudaHostRegister"):
            self.assertRegex(r.stdout, r"\| %s \| [0-9.]+(, [0-9.]+){4} \|" % re.escape(way))



# The smallest run of every part: one thread (this machine has two cores, shared).
TINY = ["--threads", "1", "--sizes", "1M", "--chunks", "256K,1M", "--slots", "2,4"]


def broken_probe(test, name, old, new):
    """pageable_probe.cpp with `old` (found once) replaced by `new`, built on the fake cudart."""
    with open(os.path.join(HERE, "pageable_probe.cpp")) as f:
        src = f.read()
    test.assertEqual(src.count(old), 1, old)
    path = os.path.join(BUILD, name + ".cpp")
    with open(path, "w") as f:
        f.write(src.replace(old, new))
    return build(name, path, cuda=False, includes=[FAKE, HERE])


class ProbeOnFakeCudart(unittest.TestCase):
    def run_probe(self, exe, *args):
        csv_path = os.path.join(BUILD, "probe.csv")
        r = subprocess.run([exe, "--csv", csv_path] + list(args), capture_output=True, text=True, timeout=600)
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        return r, rows

    def test_every_part_prints(self):
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        r, rows = self.run_probe(exe, *TINY)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        out = r.stdout
        self.assertNotIn("DATA CHECK FAILED", out)
        for title in ["### Summary: the floor per size and direction", "### (c) Host memcpy with T threads",
                      "### (d) Staged pipeline H2D, hot threads", "### (d) Staged pipeline H2D, cold threads",
                      "### (d) Staged pipeline D2H, hot threads", "### (d) Staged pipeline D2H, cold threads",
                      "### (e) What a pipeline is made of", "### (f) Registering pageable memory for each copy",
                      "### (g) The host copy and the DMA at the same time, GB/s"]:
            self.assertIn(title, out)
        self.assertIn("GPU fake cudart (host memory)", out)
        summary = [line for line in out.splitlines() if line.startswith("| H2D | 1 MiB") or
                   line.startswith("| D2H | 1 MiB")]
        self.assertEqual(len(summary), 2 + 2 + 2 * 2, summary)  # summary, (f) and (g) rows (2 stores)
        self.assertRegex(out, r"\| H2D \| 1 MiB \| [0-9.]+ GB/s \| [0-9.]+ GB/s \| [0-9.]+ GB/s \(T=1, (memcpy|stream)\) \|")
        # the summary's last two columns: (g)'s bound under load and the best pipeline against it
        self.assertRegex(out, r"\| [0-9.]+ GB/s \(T=1, (memcpy|stream)\) \| [0-9]+% \|\n")
        parts = {}
        for row in rows:
            parts.setdefault(row["part"], []).append(row)
            self.assertGreater(float(row["median_s"]), 0, row)
        # (a), (b), (f): 2 directions; (c): 2 x 2 stores; (d): 2 dirs x 2 chunks x 2 slot counts x 2 modes
        # x 2 stores, copy + first; (g): 2 dirs x 2 stores x 4 rates
        self.assertEqual(len(parts["a"]), 2)
        self.assertEqual(len(parts["b"]), 2)
        self.assertEqual(len(parts["c"]), 2 * 2)
        self.assertEqual(len(parts["d"]), 2 * 2 * 2 * 2 * 2 * 2)
        self.assertEqual({r["stores"] for r in parts["d"]}, {"memcpy", "stream"})
        self.assertEqual(len(parts["g"]), 2 * 2 * 4)
        self.assertEqual({r["metric"] for r in parts["g"]}, {"host copy alone", "host copy under DMA load",
                                                              "DMA alone", "DMA under host copy load"})
        for row in parts["g"]:
            self.assertGreater(float(row["gbs"]), 0, row)
        self.assertEqual(len(parts["f"]), 2 * 3)
        self.assertLessEqual({"futex wake -> first thread running", "futex wake -> last thread running",
                              "handoff to spinning threads and back (empty job)",
                              "cudaEventRecord + cudaEventQuery until complete (idle stream)",
                              "cudaEventQuery of a completed event"}, {r["metric"] for r in parts["e"]})
        # making a staging buffer of the largest chunk three ways; copies from a file mapping, first touch and
        # touched, of two sizes (T=1)
        self.assertEqual(sorted(r["metric"] for r in parts["e"] if r["metric"].startswith("make a ")),
                         sorted("make a 1 MiB staging buffer: " + w for w in (
                             "cudaHostAlloc (portable)", "mmap, MADV_HUGEPAGE, touch, cudaHostRegister",
                             "mmap, 4 KiB pages, touch, cudaHostRegister")))
        self.assertEqual(sorted(r["metric"] for r in parts["e"] if "mapping" in r["metric"]),
                         sorted("copy %s from %s to pinned" % (n, w) for n in ("256 KiB", "4608 KiB")
                                for w in ("a fresh mapping of a cached file", "the same mapping, touched,")))
        # four chunks' DMAs on one stream and over two, both directions (4 x 256 KiB fits 1 MiB, 4 x 1 MiB not)
        self.assertEqual(sorted(r["metric"] for r in parts["e"] if r["metric"].startswith("4 DMAs")),
                         sorted("4 DMAs %s pinned of 256 KiB, %s, until all done" % (d, s) for d in ("H2D", "D2H")
                                for s in ("one stream (legacy)", "alternating over 2 blocking streams")))

    def test_stream_stores_with_and_without_the_prefetch_copy_every_byte(self):
        # the library's non-temporal copy (a prefetch a page ahead) and the same without it
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        r, rows = self.run_probe(exe, "--parts", "cdg", "--stores", "stream,stream-noahead", *TINY)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertNotIn("DATA CHECK FAILED", r.stdout)
        self.assertEqual({row["stores"] for row in rows if row["part"] in "cdg"}, {"stream", "stream-noahead"})
        self.assertEqual(len([row for row in rows if row["part"] == "c"]), 4)

    def test_demote_stores_copy_every_byte(self):
        # CLDEMOTE after memcpy (a NOP where the processor lacks it): the data checks hold
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        r, rows = self.run_probe(exe, "--parts", "cdg", "--stores", "demote", *TINY)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertNotIn("DATA CHECK FAILED", r.stdout)
        self.assertEqual({row["stores"] for row in rows if row["part"] in "cdg"}, {"demote"})
        self.assertEqual(len([row for row in rows if row["part"] == "c"]), 2)

    def broken(self, name, old, new):
        return broken_probe(self, name, old, new)

    def test_a_wrong_copy_from_a_file_mapping_is_caught(self):
        exe = self.broken("probe_maps_wrong", "CopyJob job{dst, static_cast<const unsigned char *>(map), n,",
                          "CopyJob job{dst, static_cast<const unsigned char *>(map) + 1, n,")
        r, _ = self.run_probe(exe, "--parts", "e", *TINY)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (e) copy 256 KiB from a file mapping, T=1: data differ", r.stdout)

    def test_broken_pipelines_are_caught(self):
        h2d = self.broken("probe_reuses_staging", "if (k + 1 >= static_cast<size_t>(K)) spin_event(ev[(k + 1) % K]);",
                          "(void)K;")
        d2h = self.broken("probe_reads_early", "            spin_event(ev[k % K]);\n            job = CopyJob{dst",
                          "            job = CopyJob{dst")
        args = ["--parts", "d", "--threads", "1", "--sizes", "1M", "--chunks", "256K", "--slots", "2"]
        r, _ = self.run_probe(h2d, *args)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (d) pipeline H2D 1 MiB C=256 KiB T=1 K=2", r.stdout)
        self.assertNotIn("**DATA CHECK FAILED**: (d) pipeline D2H", r.stdout)
        r, _ = self.run_probe(d2h, *args)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (d) pipeline D2H 1 MiB C=256 KiB T=1 K=2", r.stdout)
        self.assertNotIn("**DATA CHECK FAILED**: (d) pipeline H2D", r.stdout)


# A stand-in llaisys table for part l on the fake cudart (whose "device" memory is host memory):
# memcpy_sync is memcpy; SHORT copies one byte less (the probe's data check must catch it).
FAKE_TABLE = r"""
#include <cstdlib>
#include <cstring>
#include "llaisys_runtime.h"
static int count() { return 1; }
static void set(int) {}
static void nop() {}
static llaisysStream_t mk() { return nullptr; }
static void st(llaisysStream_t) {}
static void *ma(size_t n) { return std::malloc(n); }
static void fr(void *p) { std::free(p); }
static void sync_copy(void *d, const void *s, size_t n, llaisysMemcpyKind_t) { std::memcpy(d, s, n - SHORT); }
static void async_copy(void *d, const void *s, size_t n, llaisysMemcpyKind_t k, llaisysStream_t) { sync_copy(d, s, n, k); }
static const LlaisysRuntimeAPI table = {count, set, nop, mk, st, st, ma, fr, ma, fr, sync_copy, async_copy};
extern "C" const LlaisysRuntimeAPI *fakeGetRuntimeAPI() { return &table; }
"""


class ProbeLibraryPart(unittest.TestCase):
    """Part l (--library) on the fake cudart, with a stand-in table."""

    def table(self, short):
        name = "fake_table_%d" % short
        path = os.path.join(BUILD, name + ".cpp")
        with open(path, "w") as f:
            f.write("#define SHORT %d\n" % short + FAKE_TABLE)
        return build(name + ".so", path, cuda=False, shared=True)

    def run_l(self, lib, *extra):
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        csv_path = os.path.join(BUILD, "probe_l.csv")
        args = [exe, "--csv", csv_path, "--parts", "dl", "--threads", "1", "--sizes", "1M", "--chunks", "256K",
                "--slots", "2", "--library", lib, "--library-symbol", "fakeGetRuntimeAPI"] + list(extra)
        r = subprocess.run(args, capture_output=True, text=True, timeout=600)
        rows = []
        if os.path.exists(csv_path):
            with open(csv_path, newline="") as f:
                rows = [row for row in csv.DictReader(f) if row["part"] == "l"]
            os.remove(csv_path)
        return r, rows

    def test_library_beside_pipeline(self):
        r, rows = self.run_l(self.table(0))
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertNotIn("DATA CHECK FAILED", r.stdout)
        self.assertIn("### (l) The library's memcpy_sync beside the probe's pipeline", r.stdout)
        # one row per direction, the best (d) configuration of the run: C=256 KiB, T=1, K=2
        self.assertRegex(r.stdout, r"\| H2D \| 1 MiB \| 256 KiB, 1, 2, (memcpy|stream) \| [0-9.]+ GB/s \|")
        self.assertRegex(r.stdout, r"\| D2H \| 1 MiB \| 256 KiB, 1, 2, (memcpy|stream) \| [0-9.]+ GB/s \|")
        # 2 directions x (library, pipeline, thread-seconds) x (cold, hot), each with every sample
        self.assertEqual(len(rows), 2 * 3 * 2, rows)
        self.assertEqual({(x["metric"], x["mode"]) for x in rows},
                         {(m, c) for m in ("library", "pipeline", "pipeline thread-seconds") for c in ("cold", "hot")})
        for x in rows:
            self.assertGreater(float(x["gbs"]), 0, x)
            self.assertEqual(len(x["samples_s"].split(";")), 15, x)

    def test_a_library_that_loses_data_is_caught(self):
        r, _ = self.run_l(self.table(1))
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (l) library memcpy_sync H2D 1 MiB", r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (l) library memcpy_sync D2H 1 MiB", r.stdout)
        self.assertNotIn("**DATA CHECK FAILED**: (l) probe pipeline", r.stdout)

    def test_round_trip_part(self):
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        csv_path = os.path.join(BUILD, "probe_r.csv")
        args = [exe, "--csv", csv_path, "--parts", "r", "--threads", "1", "--sizes", "1M", "--chunks", "256K,1M",
                "--slots", "2", "--library", self.table(0), "--library-symbol", "fakeGetRuntimeAPI"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertNotIn("DATA CHECK FAILED", r.stdout)
        self.assertIn("### (r) The tensor round trip", r.stdout)
        self.assertRegex(r.stdout, r"\| 1 MiB \| [0-9.]+ [mun]?s \| [0-9.]+ [mun]?s \(C=(256 KiB|1 MiB), T=1, K=2, "
                                   r"(memcpy|stream)\) \| [0-9.]+ [mun]?s \(C=")
        with open(csv_path, newline="") as f:
            rows = [row for row in csv.DictReader(f) if row["part"] == "r"]
        os.remove(csv_path)
        # the link; 2 chunks x 2 modes x 2 stores of pipelines; the library cold and hot
        self.assertEqual(len([x for x in rows if x["metric"] == "link (pinned)"]), 1, rows)
        self.assertEqual(len([x for x in rows if x["metric"] == "copy"]), 2 * 2 * 2, rows)
        self.assertEqual({x["mode"] for x in rows if x["metric"] == "library"}, {"cold", "hot"})
        for x in rows:
            self.assertGreater(float(x["gbs"]), 0, x)
        # a round trip whose H2D never happens reads the poisoned device buffer back: caught
        broken = broken_probe(self, "probe_round_trip_no_h2d",
                              "                                pipeline_h2d(w, dev, pg_src, n, c, k, st, first, false);\n",
                              "")
        r = subprocess.run([broken, "--parts", "r", "--threads", "1", "--sizes", "1M", "--chunks", "256K", "--slots", "2"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("**DATA CHECK FAILED**: (r) round trip 1 MiB C=256 KiB T=1 K=2", r.stdout)

    def test_part_l_needs_a_library(self):
        exe = build("pageable_probe_fake", os.path.join(HERE, "pageable_probe.cpp"), cuda=False, includes=[FAKE])
        r = subprocess.run([exe, "--parts", "l"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("part l needs --library PATH", r.stderr)
        r = subprocess.run([exe, "--parts", "l", "--library", "/nonexistent/lib.so"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot load /nonexistent/lib.so", r.stderr)


def tearDownModule():
    shutil.rmtree(BUILD, ignore_errors=True)


def trace_line(direction, size, start_us, took_us, threads=""):
    """A line as src/pageable/trace.rs writes it (the phases after the times are not read);
    `threads`: the host threads' marks it ends with, if any."""
    return ("llaisys-nvidia pageable trace: %s %d B, 2 chunks, 12 threads, stream 0x0: %.1f us, from %.1f us; "
            "slot wait 0.0 us x0; host copy 1.0 us x1; enqueue 1.0 us x1; record 0.5 us x1; other 0.5 us; "
            "queued0 @1.0%s\n" % (direction, size, took_us, start_us, threads))


class TraceSummary(unittest.TestCase):
    """trace_summary.py on a synthetic trace: loads split at pauses, sums, medians, GB/s."""

    def run_on(self, lines, *args):
        path = os.path.join(BUILD, "trace.log")
        with open(path, "w") as f:
            f.writelines(lines)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = trace_summary.main(list(args) + [path])
        return rc, out.getvalue(), err.getvalue()

    def test_loads_sizes_and_gaps(self):
        mb = 1000000
        lines = ["weights_load: something else\n",
                 # load 1: 4 MB in 100 us, 10 us pause, 4 MB in 100 us, 30 us pause, 1 MB in 50 us
                 trace_line("HostToDevice", 4 * mb, 0.0, 100.0),
                 trace_line("HostToDevice", 4 * mb, 110.0, 100.0),
                 trace_line("HostToDevice", 1 * mb, 240.0, 50.0),
                 # load 2, 60 ms later: one 2 MB D2H copy in 40 us
                 trace_line("DeviceToHost", 2 * mb, 60290.0, 40.0)]
        rc, out, err = self.run_on(lines, "--link", "50")
        self.assertEqual(rc, 0, err)
        self.assertIn("### Load 1", out)
        self.assertIn("- 3 copies, 0.009 GB: span 0.3 ms, in copies 0.2 ms, between them 0.0 ms; the bytes at "
                      "50.0 GB/s: 0.2 ms", out)
        self.assertIn("| HostToDevice | 4000000 | 2 | 100.0 us | 40.0 | 5.0 us | 0.01 ms |", out)
        self.assertIn("| HostToDevice | 1000000 | 1 | 50.0 us | 20.0 | 30.0 us | 0.03 ms |", out)
        self.assertIn("### Load 2", out)
        self.assertIn("| DeviceToHost | 2000000 | 1 | 40.0 us | 50.0 | 0.0 us | 0.00 ms |", out)
        # a longer pause threshold keeps it one load
        rc, out, _ = self.run_on(lines, "--gap-ms", "100")
        self.assertEqual(rc, 0)
        self.assertNotIn("### Load 2", out)
        self.assertIn("- 4 copies, 0.011 GB", out)

    def test_host_threads(self):
        mb = 1000000
        # handed to the threads at 10 us; the last joined at 20, 110 and 1010 us (10, 100 and
        # 1000 us after); 2 MB copied in 1000 us of thread time each; waits of 50, 0 and 250 us
        marks = ["; pieces8 @1.0; asleep%d @10.0; joined_first4 @12.0; joined_last4 @%.1f; "
                 "busy8 =1000.0 us; waited8 =%.1f us" % (a, j, w)
                 for a, j, w in ((0, 20.0, 50.0), (3, 110.0, 0.0), (6, 1010.0, 250.0))]
        lines = [trace_line("HostToDevice", 2 * mb, 0.0, 100.0, marks[0]),
                 trace_line("HostToDevice", 2 * mb, 200.0, 100.0, marks[1]),
                 trace_line("HostToDevice", 2 * mb, 400.0, 100.0, marks[2]),
                 # a copy behind a pending DMA, no helpers: it counts to nothing here
                 trace_line("HostToDevice", 3072, 600.0, 5.0)]
        rc, out, err = self.run_on(lines)
        self.assertEqual(rc, 0, err)
        self.assertIn("- host threads: 2.00 GB/s per thread copying (bytes over their summed copy time), "
                      "0.3 ms in all waiting for chunks; 3.0 of the pool's threads asleep when handed a copy "
                      "(mean of 3 copies); the last joined 100.0 us after (median), 1000.0 us (90th "
                      "percentile)", out)
        # a trace without the threads' marks has no such line
        rc, out, _ = self.run_on([trace_line("HostToDevice", 2 * mb, 0.0, 100.0)])
        self.assertEqual(rc, 0)
        self.assertNotIn("host threads", out)

    def test_no_trace_lines_is_an_error(self):
        rc, out, err = self.run_on(["nothing traced\n"])
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertIn("no pageable trace lines", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
