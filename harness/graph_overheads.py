#!/usr/bin/env python3
"""Two costs of a decode step replayed from a CUDA graph that per-kernel micro-benchmarks miss.

1. The stall before a replay's first collective. A graph holds K small compute kernels with L
   all_reduces interleaved (L = 0, 1, 2, 4, 8); replays are timed back to back with CUDA events.
   T(L) - T(0) = stall * [L > 0] + L * t_collective, fitted per message size by the calibrator.
   Writes graph_overheads.csv: nranks,bytes,collectives,kernels,median_us,p10_us,p90_us,reps
2. Launch skew between ranks. Each rank drives its own process, replaying the graph once per step
   and synchronising with the host after it (as an engine does: sample, then schedule the next
   step; and as harness/refstep.py does when it captures traces). Under torch.profiler, the first
   collective of each step waits on the ranks that launched late; per step and rank,
   wait = its first collective's duration minus the shortest one over ranks.
   Writes launch_skew.csv: nranks,steps,mean_first_wait_us,median_first_wait_us,max_first_wait_us,
   mean_first_gap_us,mean_later_gap_us
   (gaps: idle time before the first / the other collectives of a step, from the same traces).

Run: python3 harness/graph_overheads.py --out DIR  (uses every GPU present; NCCL defaults).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, free_port, log, quantiles, set_nccl_safety_env  # noqa: E402

SIZES = [14336, 229376, 917504]          # B = 1, 16, 64 tokens x 7168 x 2 bytes
COLLECTIVE_COUNTS = [0, 1, 2, 4, 8]
KERNELS = 48                              # small compute kernels per graph
STEPS = 24                                # profiled steps for the launch skew


def worker(rank, world, port, out_dir):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    set_nccl_safety_env()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    dev = torch.device("cuda", rank)
    x = torch.randn(64, 7168, device=dev, dtype=torch.bfloat16)

    def build(n_coll, nbytes):
        buf = torch.randn(nbytes // 2, device=dev, dtype=torch.bfloat16)
        every = KERNELS // max(n_coll, 1)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm up NCCL and the kernels outside the graph
                for i in range(KERNELS):
                    x.mul_(1.0001)
                    if n_coll and i % every == every - 1 and (i // every) < n_coll:
                        dist.all_reduce(buf)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(KERNELS):
                x.mul_(1.0001)
                if n_coll and i % every == every - 1 and (i // every) < n_coll:
                    dist.all_reduce(buf)
        torch.cuda.synchronize()
        return g

    def timed(g, reps=30):
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        out = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1000.0)
        return out

    csv = CsvOut(os.path.join(out_dir, "graph_overheads.csv"),
                 ["nranks", "bytes", "collectives", "kernels", "median_us", "p10_us", "p90_us", "reps"]) if rank == 0 else None
    for nbytes in SIZES:
        for n in COLLECTIVE_COUNTS:
            g = build(n, nbytes)
            ts = timed(g)
            med, p10, p90 = quantiles(ts)
            if csv:
                csv.row(dict(nranks=world, bytes=nbytes, collectives=n, kernels=KERNELS,
                             median_us=med, p10_us=p10, p90_us=p90, reps=len(ts)))
                log(f"bytes={nbytes} collectives={n}: {med:.1f} us")
            del g
    if csv:
        csv.close()

    # Launch skew: one replay per step, host-synchronised, as engines and refstep.py drive it.
    g = build(8, SIZES[1])
    for _ in range(3):
        g.replay()
        torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            with record_function("execute_context_0(0)_generation_16(16)"):
                g.replay()
                torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), f"skew_rank{rank}.json")
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    kernels = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    steps = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation"
                    and e.get("name", "").startswith("execute_")), key=lambda e: e["ts"])
    per_step = []  # (first collective duration, gap before it, gaps before the others)
    for s in steps[:STEPS]:
        ks = [k for k in kernels if s["ts"] <= k["ts"] < s["ts"] + s["dur"]]
        first, gaps_later, prev_end, seen = None, [], None, False
        for k in ks:
            if "nccl" in k["name"].lower():
                gap = k["ts"] - prev_end if prev_end is not None else 0.0
                if not seen:
                    first = (k["dur"], gap)
                    seen = True
                else:
                    gaps_later.append(gap)
            prev_end = k["ts"] + k["dur"] if prev_end is None else max(prev_end, k["ts"] + k["dur"])
        if first:
            per_step.append((first[0], first[1], sum(gaps_later) / max(len(gaps_later), 1)))
    gathered = [None] * world
    dist.all_gather_object(gathered, per_step)
    if rank == 0:
        n = min(len(p) for p in gathered)
        waits, first_gaps, later_gaps = [], [], []
        for i in range(n):
            durs = [gathered[r][i][0] for r in range(world)]
            shortest = min(durs)
            waits.extend(d - shortest for d in durs)
            first_gaps.extend(gathered[r][i][1] for r in range(world))
            later_gaps.extend(gathered[r][i][2] for r in range(world))
        med, _, _ = quantiles(waits)
        out = CsvOut(os.path.join(out_dir, "launch_skew.csv"),
                     ["nranks", "steps", "mean_first_wait_us", "median_first_wait_us", "max_first_wait_us",
                      "mean_first_gap_us", "mean_later_gap_us"])
        out.row(dict(nranks=world, steps=n, mean_first_wait_us=sum(waits) / len(waits),
                     median_first_wait_us=med, max_first_wait_us=max(waits),
                     mean_first_gap_us=sum(first_gaps) / len(first_gaps),
                     mean_later_gap_us=sum(later_gaps) / len(later_gaps)))
        out.close()
        log(f"launch skew over {n} steps: mean first-collective wait {sum(waits) / len(waits):.1f} us, "
            f"first gap {sum(first_gaps) / len(first_gaps):.1f} us, later gaps {sum(later_gaps) / len(later_gaps):.1f} us")
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import torch.multiprocessing as mp
    os.makedirs(a.out, exist_ok=True)
    world = torch.cuda.device_count()
    mp.spawn(worker, args=(world, free_port(), a.out), nprocs=world, join=True)


if __name__ == "__main__":
    main()
