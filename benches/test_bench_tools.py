#!/usr/bin/env python3
"""Host-only tests of the benchmark's Python tools (no GPU, no torch needed):

    python3 benches/test_bench_tools.py          # or: TABLE_BENCH=/path/to/table_bench python3 ...

- bench_merge.py on synthetic table_bench output (bench.md + samples CSV) and torch CSVs: the
  columns, cells, ratios, notes, and what it does without a torch CSV;
- bench_common.py's number formats against cells table_bench printed (docs/benchmark.md's table);
- torch_bench.py run end to end against a small stand-in for torch (byte buffers, no device): the
  rows it writes, that each is one table_bench also has, and that a copy which loses data is
  caught by its data check;
- bench_baselines.py (gpu-bench.sh --baselines) on a synthetic samples CSV: each row's ratio,
  the tolerance, the summary and the exit code;
- weights_torch.py's table (medians, GB/s, ours' speed-up from weights_load's CSV) and its stop
  without torch;
- torch_bench's row names against `table_bench --list` (TABLE_BENCH, or built here with g++
  against .deps/cuda13 as docs/benchmark.md shows, -Wall -Wextra -Werror);
- table_bench built with g++ against the real cudart: without a GPU it stops with exit code 3 and
  its message (it loads benches/baseline_runtime.cpp, built here the same way, as the reference,
  and $LLAISYS_NVIDIA_LIB, gpu-stage/static/libllaisys_nvidia.so, or
  target/release's: run `bash scripts/stage-gpu.sh` or `cargo build --release` first;
  tests/bench_fake.rs runs this file with the test's cdylib).
Takes about half a minute (two g++ builds).
"""

import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_baselines  # noqa: E402
import bench_common  # noqa: E402
import bench_merge as merge_mod  # noqa: E402
import torch_bench  # noqa: E402
import weights_torch  # noqa: E402

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
        f = bench_common
        for value, text in [(3.24e-9, "3.24 ns"), (222e-9, "222 ns"), (2.13e-6, "2.13 us"), (744e-6, "744 us"),
                            (28.7e-3, "28.7 ms"), (1.5, "1.50 s"), (float("nan"), "n/a")]:
            self.assertEqual(f.fmt_time(value), text)
        for value, text in [(55.04, "55.0 GB/s"), (0.5, "0.50 GB/s"), (1593.2, "1593 GB/s")]:
            self.assertEqual(f.fmt_gbs(value), text)
        for value, text in [(6.16, "6.16x"), (147835.0, "147835x"), (10.04, "10.0x"), (float("inf"), "n/a")]:
            self.assertEqual(f.fmt_ratio(value), text)

    def test_sizes_as_table_bench_names_them(self):
        self.assertEqual([bench_common.fmt_size(x) for x in (64, 4096, 65536, 1 << 20, 16 << 20, 1 << 30, 1536)],
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
class Baselines(unittest.TestCase):
    """bench_baselines.py: our baseline ("ours static" column) against another ("reference")."""

    def run_main(self, rows, *args):
        path = os.path.join(BUILD, "baselines.csv")
        write_samples(path, rows)
        out = io.StringIO()
        old, sys.stdout = sys.stdout, out
        try:
            rc = bench_baselines.main(["--samples", path] + list(args))
        finally:
            sys.stdout = old
        return rc, out.getvalue()

    ROWS = [
        ("set_device(0)", "ours static", "latency", 0, [72.0e-9, 71.8e-9, 71.9e-9]),
        ("set_device(0)", "reference", "latency", 0, [71.8e-9, 71.8e-9, 71.7e-9]),
        ("set_device(0)", "raw", "latency", 0, [69.3e-9] * 3),
        ("set_device(0)", "ours dynamic", "latency", 0, [70.5e-9] * 3),
        ("memcpy_sync H2D pinned 64 MiB", "ours static", "bandwidth", 64 << 20, [64 * 2**20 / 50e9] * 3),
        ("memcpy_sync H2D pinned 64 MiB", "reference", "bandwidth", 64 << 20, [64 * 2**20 / 52e9] * 3),
        ("only ours", "ours static", "latency", 0, [1e-6] * 3),
    ]

    def test_every_row_with_both_columns_and_its_ratio(self):
        rc, md = self.run_main(self.ROWS)
        self.assertEqual(rc, 1, md)  # 52 / 50 GB/s: 4% apart
        self.assertIn("| workload | our baseline | seed_runtime.cu | time ratio (our baseline / seed_runtime.cu) "
                      "| within 3% | A/A (our baseline / its copy) |", md)
        self.assertIn("| set_device(0) | 71.9 ns | 71.8 ns | 1.00x | yes | 1.02x |", md)
        self.assertIn("| memcpy_sync H2D pinned 64 MiB | 50.0 GB/s | 52.0 GB/s | 1.04x | NO | - |", md)
        self.assertNotIn("only ours", md)
        self.assertIn("our baseline within 3% of seed_runtime.cu on 1 of 2 rows; outside: "
                      "`memcpy_sync H2D pinned 64 MiB` (1.04x)\nA/A over the same rows: 1.02x to 1.02x\n", md)

    def test_tolerance_and_labels(self):
        rc, md = self.run_main(self.ROWS, "--tolerance", "0.05", "--first", "A", "--second", "B")
        self.assertEqual(rc, 0, md)
        self.assertIn("A within 5% of B on 2 of 2 rows\n", md)

    def test_no_common_row(self):
        rc, md = self.run_main(self.ROWS[-1:])
        self.assertEqual((rc, md), (2, ""))


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
                                          if name.endswith(" " + bench_common.fmt_size(s))][0])
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


def build(name, source, shared=False, includes=()):
    """g++ -Wall -Wextra -Werror of one file against the CUDA 13 wheel's cudart; cached per name."""
    if name in _built:
        return _built[name]
    out = os.path.join(BUILD, name)
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(ROOT, "csrc")]
    cmd += ["-I" + i for i in includes] + ["-I" + os.path.join(CUDA, "include")]
    if shared:
        cmd += ["-shared", "-fPIC", "-Wl,--exclude-libs,ALL"]
    cmd += ["-x", "c++", source, "-x", "none", os.path.join(CUDA, "lib", "libcudart_static.a")]
    cmd += ["-ldl", "-lrt", "-lpthread", "-o", out]
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
        self.assertIn("weights_torch: torch or safetensors.torch unavailable", err)


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


class NoGpu(unittest.TestCase):
    def test_table_bench_exits_3(self):
        libs = [os.environ.get("LLAISYS_NVIDIA_LIB", ""),
                os.path.join(ROOT, "gpu-stage", "static", "libllaisys_nvidia.so"),
                os.path.join(ROOT, "target", "release", "libllaisys_nvidia.so")]
        ours = [p for p in libs if p and os.path.exists(p)]
        self.assertTrue(ours, "no libllaisys_nvidia.so in %s: run `bash scripts/stage-gpu.sh` first" % libs)
        # The reference column's library: our baseline, as scripts/gpu-bench.sh builds it by default.
        ref = build("libbaseline_runtime.so", os.path.join(HERE, "baseline_runtime.cpp"), shared=True)
        r = subprocess.run([table_bench_binary(), ours[0], ours[0], ref], capture_output=True, text=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("table_bench: no CUDA device available (cudaGetDeviceCount: cudaErrorInsufficientDriver (35)",
                      r.stderr)
        self.assertEqual(r.stdout, "")


def tearDownModule():
    shutil.rmtree(BUILD, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
