#!/usr/bin/env python3
"""NCCL collective latency over all GPUs of the host (any count: 2, 4, 8).

For each NCCL setting (NCCL_PROTO x NCCL_ALGO x P2P on/off) a fresh group of processes (one per
GPU) is spawned, because NCCL reads several of these variables once per process.  Each process
group measures:
  all_reduce (bf16 sum) and all_gather (bf16; bytes = OUTPUT bytes), 2 KB .. 64 MB, in
    mode graph: n collectives captured in one CUDA graph, time per collective = replay / n
    mode eager: events around a loop of n collectives launched from Python (launch bound for
                small messages: the CPU cost of ProcessGroupNCCL dominates)
  burst: 123 back-to-back all_reduces of B x 14,336 bytes (B = 1,4,16,64,128,256) captured in one
    graph (what one Kimi decode step issues); per-collective time = replay / 123.

Writes collectives.csv: op,nranks,bytes,proto,algo,p2p,mode,median_us,p10_us,p90_us,reps
(rank 0's CUDA-event times; collectives synchronise the ranks so the others agree).
"""
import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, free_port, log, quantiles, run_group, set_nccl_safety_env  # noqa: E402

COLS = ["op", "nranks", "bytes", "proto", "algo", "p2p", "mode", "median_us", "p10_us", "p90_us", "reps"]

FULL_SETTINGS = [
    ("default", "default", "on"),
    ("LL", "default", "on"), ("LL128", "default", "on"), ("Simple", "default", "on"),
    ("LL", "Ring", "on"), ("LL128", "Ring", "on"), ("Simple", "Ring", "on"),
    ("LL", "Tree", "on"), ("LL128", "Tree", "on"), ("Simple", "Tree", "on"),
    ("default", "default", "off"),
    ("LL", "Ring", "off"), ("Simple", "Ring", "off"),
]



def apply_setting_env(proto, algo, p2p):
    set_nccl_safety_env()
    for k in ["NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_DISABLE"]:
        os.environ.pop(k, None)
    if proto != "default":
        os.environ["NCCL_PROTO"] = proto
    if algo != "default":
        os.environ["NCCL_ALGO"] = algo
    if p2p == "off":
        os.environ["NCCL_P2P_DISABLE"] = "1"


def worker(rank, world, setting, port, out_csv, sizes, bursts, n_samples):
    proto, algo, p2p = setting
    apply_setting_env(proto, algo, p2p)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    csv = CsvOut(out_csv, COLS, append=True) if rank == 0 else None
    base = dict(nranks=world, proto=proto, algo=algo, p2p=p2p)

    def emit(op, nbytes, mode, per, reps):
        if csv is None:
            return
        med, p10, p90 = quantiles(per)
        d = dict(base, op=op, bytes=nbytes, mode=mode, median_us=med, p10_us=p10, p90_us=p90, reps=reps)
        csv.row(d)

    def timed(run, n_per, samples):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        run()  # one warm run after the barrier
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
        for a, b in evs:
            a.record()
            run()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 / n_per for a, b in evs]

    def make_op(op, nbytes):
        n_el = nbytes // 2
        if op == "all_reduce":
            t = torch.randn(n_el, device=dev, dtype=torch.bfloat16)
            return lambda: dist.all_reduce(t)
        o = torch.empty(n_el, device=dev, dtype=torch.bfloat16)
        i = torch.randn(n_el // world, device=dev, dtype=torch.bfloat16)
        return lambda: dist.all_gather_into_tensor(o, i)

    ops = ["all_reduce"] + ([] if algo == "Tree" else ["all_gather"])  # all_gather has no Tree
    t0 = time.time()
    for op in ops:
        for nbytes in sizes:
            try:
                f = make_op(op, nbytes)
                for _ in range(3):
                    f()
                torch.cuda.synchronize()
                n_per = 20 if nbytes <= (1 << 20) else (8 if nbytes <= (16 << 20) else 4)
                # eager
                per = timed(lambda: [f() for _ in range(n_per)], n_per, n_samples)
                emit(op, nbytes, "eager", per, n_samples)
                # graph
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    f()
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(n_per):
                        f()
                per = timed(g.replay, n_per, n_samples)
                emit(op, nbytes, "graph", per, n_samples)
                del g, f
            except Exception as e:  # noqa: BLE001
                if rank == 0:
                    log(f"[{setting}] {op} {nbytes} failed: {e!r}"[:400])
                    traceback.print_exc()
    # burst: 123 all_reduces of B x 14336 bytes in one graph
    for B in bursts:
        try:
            nbytes = B * 14336
            ts = [torch.randn(nbytes // 2, device=dev, dtype=torch.bfloat16) for _ in range(123)]
            for t in ts[:3]:
                dist.all_reduce(t)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                dist.all_reduce(ts[0])
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for t in ts:
                    dist.all_reduce(t)
            per = timed(g.replay, 123, max(5, n_samples // 2))
            emit("all_reduce", nbytes, "burst", per, len(per))
            del g, ts
        except Exception as e:  # noqa: BLE001
            if rank == 0:
                log(f"[{setting}] burst B={B} failed: {e!r}"[:400])
    if rank == 0:
        log(f"setting {setting} done in {time.time() - t0:.1f} s")
        csv.close()
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--settings", default="full", help="full | list like default/default/on,LL/Ring/on")
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--timeout-per-setting", type=float, default=90.0)
    args = ap.parse_args()
    set_nccl_safety_env()
    import torch
    import torch.multiprocessing as mp
    world = torch.cuda.device_count()
    os.makedirs(args.out, exist_ok=True)
    out_csv = os.path.join(args.out, "collectives.csv")
    if os.path.exists(out_csv):
        os.remove(out_csv)
    sizes = [1 << p for p in range(11, 27)]
    bursts = [1, 4, 16, 64, 128, 256]
    if args.settings == "full":
        settings = FULL_SETTINGS
    else:
        settings = [tuple(s.split("/")) for s in args.settings.split(",")]
    if args.smoke:
        sizes = [2048, 65536, 1 << 22]
        bursts = [1, 64]
        if args.settings == "full":
            settings = [("default", "default", "on"), ("LL", "Tree", "on"), ("LL", "Ring", "off")]
    log(f"collectives: world={world} settings={len(settings)} sizes={len(sizes)}")
    ctx = mp.get_context("spawn")
    for st in settings:
        t0 = time.time()
        port = free_port()
        codes, to = run_group(ctx, worker, world,
                              lambda r: (r, world, st, port, out_csv, sizes, bursts, args.samples),
                              args.timeout_per_setting)
        log(f"setting {st}: {time.time() - t0:.1f} s wall, exitcodes={codes}" + (" TIMEOUT" if to else ""))

if __name__ == "__main__":
    main()
