"""graph_bench.cu's decode step under torch, eager and as a replayed CUDAGraph; every step checked.
    python3 benches/graph_torch.py [--steps N] [--reps R] [--only K]
"""
import argparse
import statistics
import sys
import time

from bench_common import import_torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--only", type=int, default=0)
    a = ap.parse_args()
    torch = import_torch("graph_torch")
    if torch is None:
        return 3
    print(f"\n## Decode step under torch {torch.__version__}\n")
    print("| K | torch eager (us/step) | torch graph replay | replay speed-up |")
    print("|---|---|---|---|")
    stream = torch.cuda.Stream()
    for k in (50, 200, 800):
        if a.only and k != a.only:
            continue
        state = torch.zeros(16, device="cuda")
        h_in = torch.empty(16, pin_memory=True)
        h_out = torch.empty(16, pin_memory=True)
        expect = [0.0]

        def work():
            inp = torch.empty(16, device="cuda")
            t1 = torch.empty(16384, device="cuda")
            t2 = torch.empty(65536, device="cuda")
            inp.copy_(h_in, non_blocking=True)
            for _ in range(k):
                state.add_(inp[0])
            t1[:16].copy_(state)
            t2[:16].copy_(t1[:16])
            h_out.copy_(t2[:16], non_blocking=True)
            del inp, t1, t2

        with torch.cuda.stream(stream):
            # Warm up before capture (torch's rule), then capture one step.
            for _ in range(3):
                h_in.fill_(0.0)
                work()
            stream.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                work()
            stream.synchronize()
            state.zero_()
            stream.synchronize()

            def step(i, graph):
                v = float(i % 3 + 1)
                h_in.fill_(v)
                if graph:
                    g.replay()
                else:
                    work()
                stream.synchronize()
                expect[0] += v * k
                got = h_out.tolist()
                if any(x != expect[0] for x in got):
                    print(f"DATA CHECK FAILED (torch) K={k} step {i}: {got[0]} != {expect[0]}", file=sys.stderr)
                    sys.exit(1)

            for i in range(20):
                step(i, False)
            times = {False: [], True: []}
            i = 20
            for r in range(a.reps):
                for graph in ((False, True) if r % 2 == 0 else (True, False)):
                    t0 = time.perf_counter()
                    for _ in range(a.steps):
                        step(i, graph)
                        i += 1
                    times[graph].append((time.perf_counter() - t0) / a.steps)
        e = statistics.median(times[False])
        gr = statistics.median(times[True])
        print(f"| {k} | {e * 1e6:.1f} | {gr * 1e6:.1f} | {e / gr:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
