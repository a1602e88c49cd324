"""torch.distributed all-reduce and all-gather (NCCL), one process per GPU, at nccl_bench.cpp's sizes,
busbw as nccl-tests; NVLink multicast off. Median of 5 rounds of wall clock per call.
    python3 benches/nccl_torch.py [--max-bytes N] [--budget-s S]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def iterations(nbytes):
    return int(max(5, min(1000, (1 << 27) // max(nbytes, 1))))


def run(rank, n, init, max_bytes, budget):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=n)
    # Data check: the sum of ones is n; the gather of rank ids is 0..n-1 in order.
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    assert torch.all(x == n).item(), "DATA CHECK FAILED: all-reduce"
    y = torch.empty(n << 20, device="cuda")
    dist.all_gather_into_tensor(y, torch.full((1 << 20,), float(rank), device="cuda"))
    want = torch.arange(n, device="cuda", dtype=torch.float32).repeat_interleave(1 << 20)
    assert torch.equal(y, want), "DATA CHECK FAILED: all-gather"
    rows = []
    start = time.perf_counter()
    stopped = False
    for op in ("all-reduce", "all-gather"):
        nbytes = 8
        while nbytes <= max_bytes:
            count = nbytes // 4 // (n if op == "all-gather" else 1)
            if count == 0:
                nbytes *= 2
                continue
            # Every rank decides the same way (rank 0's clock, broadcast).
            late = torch.tensor([1 if time.perf_counter() - start > budget else 0], device="cuda")
            dist.broadcast(late, 0)
            if late.item():
                stopped = True
                break
            src = torch.zeros(count, device="cuda")
            dst = torch.empty(count * n, device="cuda") if op == "all-gather" else None

            def call():
                if op == "all-reduce":
                    dist.all_reduce(src)
                else:
                    dist.all_gather_into_tensor(dst, src)

            for _ in range(3):
                call()
            torch.cuda.synchronize()
            iters = iterations(nbytes)
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / iters)
            t = statistics.median(times)
            total = count * 4 * (n if op == "all-gather" else 1)
            factor = 2 * (n - 1) / n if op == "all-reduce" else (n - 1) / n
            algbw = total / t / 1e9
            rows.append((op, total, t * 1e6, algbw, algbw * factor))
            nbytes *= 2
        if stopped:
            break
    if rank == 0:
        print(f"## torch.distributed (NCCL backend {torch.cuda.nccl.version()}), {n} process(es), one per GPU\n")
        print(f"torch {torch.__version__}, float32, sum; wall clock per call, median of 5 rounds; busbw as nccl-tests.\n")
        print("| op | bytes | torch us | algbw GB/s | busbw GB/s |\n|---|---:|---:|---:|---:|")
        for op, total, us, algbw, busbw in rows:
            print(f"| {op} | {total} | {us:.2f} | {algbw:.2f} | {busbw:.2f} |")
        if stopped:
            print(f"\n(stopped at the {budget:.0f} s budget; larger sizes not measured)")
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--budget-s", type=float, default=150.0)
    a = p.parse_args()
    n = torch.cuda.device_count()
    if n < 1:
        print("nccl_torch: no CUDA device", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(run, args=(n, f"file://{d}/init", a.max_bytes, a.budget_s), nprocs=n, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
