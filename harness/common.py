"""Timing and output helpers shared by the harness scripts (no torch import at module level)."""
import csv
import os
import sys
import time

L2_BYTES = 60 * 1024 * 1024          # H200: 60 MB L2 (50 MB on H100)
ROTATE_BYTES = 256 * 1024 * 1024     # rotate read-once buffers over at least this many bytes


def set_nccl_safety_env():
    # NVLink multicast (NVLS) must stay off on these machines.
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NVSHMEM_DISABLE_NVLS"] = "1"


def free_port():
    """A free TCP port on loopback for the process group's rendezvous."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def quantiles(xs):
    s = sorted(xs)
    n = len(s)

    def q(p):
        if n == 1:
            return s[0]
        x = p * (n - 1)
        i = int(x)
        f = x - i
        return s[i] if i + 1 >= n else s[i] * (1 - f) + s[i + 1] * f
    return q(0.5), q(0.1), q(0.9)


class CsvOut:
    def __init__(self, path, header, append=False):
        self.path = path
        self.header = header
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        self.f = open(path, "a" if append else "w", newline="")
        self.w = csv.writer(self.f)
        if not (append and exists):
            self.w.writerow(header)
            self.f.flush()

    def row(self, d):
        self.w.writerow([fmt(d.get(k, 0)) for k in self.header])
        self.f.flush()

    def close(self):
        self.f.close()


def fmt(v):
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1e12 else f"{v:.6e}"
    return str(v)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)
    sys.stdout.flush()


def time_graph(fns, min_calls=8, target_s=0.08, min_samples=10, max_samples=40, warm=2, use_graph=True):
    """Time a callable (or a rotation of callables) by CUDA-graph replay.

    A graph holds n_calls >= min_calls invocations cycling through `fns`; each timed sample is one
    replay bracketed by CUDA events; per-call time = replay time / n_calls.  Returns
    (median_us, p10_us, p90_us, samples).  With use_graph=False the same loop is launched eagerly.
    """
    import torch
    n_rot = len(fns)
    n_calls = max(min_calls, n_rot)
    n_calls = ((n_calls + n_rot - 1) // n_rot) * n_rot
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        for _ in range(2):
            for f in fns:
                f()
    cur.wait_stream(side)
    torch.cuda.synchronize()
    if use_graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n_calls):
                fns[i % n_rot]()

        def run():
            g.replay()
    else:
        g = None

        def run():
            for i in range(n_calls):
                fns[i % n_rot]()
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    run()
    e1.record()
    e1.synchronize()
    t_one = e0.elapsed_time(e1) / 1e3
    n = int(max(min_samples, min(max_samples, target_s / max(t_one, 1e-6))))
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in evs:
        a.record()
        run()
        b.record()
    torch.cuda.synchronize()
    per = [a.elapsed_time(b) * 1e3 / n_calls for a, b in evs]
    del g
    med, p10, p90 = quantiles(per)
    return med, p10, p90, n


def run_group(ctx, target, world, args_fn, timeout_s):
    """Start one process per rank, wait up to timeout_s; if any rank fails or time runs out, kill
    the rest (a rank that died leaves its peers blocked inside NCCL).  Returns (exitcodes, timed_out)."""
    procs = [ctx.Process(target=target, args=args_fn(r)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout_s
    timed_out = False
    while True:
        alive = [p for p in procs if p.is_alive()]
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if not alive:
            break
        if failed or time.time() > deadline:
            timed_out = not failed
            time.sleep(2.0 if failed else 0)
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join(5)
            break
        time.sleep(0.2)
    return [p.exitcode for p in procs], timed_out
