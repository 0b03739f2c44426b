#!/usr/bin/env python3
"""Single-GPU micro-benchmarks of the kernels of a Kimi-K2.5 decode step.

Writes (under --out):
  kernels.csv  family,dtype,m,n,k,experts,group_size,batch,context,flops,bytes,median_us,p10_us,p90_us,reps
  launch.csv   mode,kernels,total_us,per_kernel_us
  kernel_check.txt  correctness of the harness Triton kernels against float references

Every kernel is timed by CUDA-graph replay (the engine decodes under full CUDA graphs): a graph
holds >= 8 (small kernels: >= 20) calls; read-once operands (weights, KV cache) are rotated over
>= 256 MB of distinct buffers so that the 60 MB L2 cannot serve them; activations are not rotated
(in a real step they were just written by the previous kernel and sit in L2).  See data/README.md.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, ROTATE_BYTES, log, time_graph  # noqa: E402

KCOLS = ["family", "dtype", "m", "n", "k", "experts", "group_size", "batch", "context",
         "flops", "bytes", "median_us", "p10_us", "p90_us", "reps"]
HID = 7168
VOCAB = 163840


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--tps", default="1,2,8")
    ap.add_argument("--families", default="all")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new families after this")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import kernels as K

    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    bf = torch.bfloat16
    t_start = time.time()
    tps = [int(x) for x in args.tps.split(",")]
    Ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    batches = [1, 4, 16, 64, 128, 256]
    ctxs = [1024, 2048, 4096, 8192, 16384, 32768]
    heads_list = sorted({64 // t for t in tps} | {16}, reverse=True)
    if args.smoke:
        Ms = [1, 64]
        tps = [2]
        batches = [1, 16]
        ctxs = [1024, 4096]
        heads_list = [32]
    fams = None if args.families == "all" else set(args.families.split(","))

    def want(f):
        if fams is not None and f not in fams:
            return False
        if time.time() - t_start > args.budget_s:
            log(f"budget exhausted, skipping {f}")
            return False
        return True

    # correctness first
    try:
        chk = K.self_test()
    except Exception as e:  # noqa: BLE001
        log(f"self test crashed: {e!r}"[:600])
        chk = [("self_test_crashed", float("inf"))]
    with open(os.path.join(args.out, "kernel_check.txt"), "w") as f:
        for name, err in chk:
            line = f"{name:45s} rel_err={err:.3e} {'OK' if err < 2e-2 else 'FAIL'}"
            f.write(line + "\n")
            log(line)

    out = CsvOut(os.path.join(args.out, "kernels.csv"), KCOLS)

    def emit(family, dtype, res, **kw):
        med, p10, p90, n = res
        d = dict(family=family, dtype=dtype, median_us=med, p10_us=p10, p90_us=p90, reps=n)
        d.update(kw)
        out.row(d)

    import traceback

    def guard(label, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            log(f"FAILED {label}: {e!r}"[:600])
            traceback.print_exc()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def copies_for(nbytes, lo=2, hi=256):
        return int(min(hi, max(lo, math.ceil(ROTATE_BYTES / max(1, nbytes)))))

    # ------------------------------------------------------------------ launch overhead
    if want("launch"):
        lo = CsvOut(os.path.join(args.out, "launch.csv"), ["mode", "kernels", "total_us", "per_kernel_us"])
        x = torch.zeros(16, device=dev)
        for n in [1, 10, 100, 1000]:
            for mode in ["eager", "graph"]:
                fns = [lambda: x.add_(1.0)]
                med, p10, p90, reps = time_graph(fns, min_calls=n, use_graph=(mode == "graph"),
                                                 min_samples=10, max_samples=30)
                lo.row(dict(mode=mode, kernels=n, total_us=med * n, per_kernel_us=med))
                log(f"launch {mode} n={n}: {med:.2f} us/kernel")
        lo.close()

    # ------------------------------------------------------------------ small kernels
    if want("small"):
        rows_list = Ms
        for m in rows_list:
            def _body(m=m):
                x = torch.randn(m, HID, device=dev, dtype=bf)
                r = torch.randn(m, HID, device=dev, dtype=bf)
                w = torch.rand(HID, device=dev, dtype=bf) + 0.5
                y = torch.empty_like(x)
                emit("norm_rms", "bf16", time_graph([lambda: K.rmsnorm(x, w, out=y)], min_calls=20),
                     m=m, n=HID, k=0, flops=4 * m * HID, bytes=4 * m * HID + 2 * HID)
                emit("norm_fused_add_rms", "bf16", time_graph([lambda: K.fused_add_rmsnorm(x, r, w)], min_calls=20),
                     m=m, n=HID, k=0, flops=5 * m * HID, bytes=8 * m * HID + 2 * HID)
                qkv = torch.randn(m, 2112, device=dev, dtype=bf)
                wq = torch.rand(1536, device=dev, dtype=bf) + 0.5
                wk = torch.rand(512, device=dev, dtype=bf) + 0.5
                qo = torch.empty(m, 1536, device=dev, dtype=bf)
                ko = torch.empty(m, 512, device=dev, dtype=bf)
                emit("norm_rms", "bf16", time_graph([lambda: K.fused_q_kv_rmsnorm(qkv, wq, wk, qo, ko)], min_calls=20),
                     m=m, n=2048, k=2, flops=4 * m * 2048, bytes=4 * m * 2048 + 2 * 2048)
                a = torch.randn(m, HID, device=dev, dtype=bf)
                emit("elementwise_add", "bf16", time_graph([lambda: torch.add(x, a, out=y)], min_calls=20),
                     m=m, n=HID, flops=m * HID, bytes=6 * m * HID)
                # rope for several head counts
                cs = K.make_cos_sin(32768, device=dev)
                pos = torch.randint(0, 32768, (m,), device=dev, dtype=torch.int32)
                for H in heads_list:
                    q = torch.randn(m, H * 192, device=dev, dtype=bf)
                    qv = q.view(m, H, 192)[:, :, 128:]
                    kpe = qkv[:, 2048:]
                    qout = torch.empty(m, H, 64, device=dev, dtype=bf)
                    emit("rope", "bf16", time_graph([lambda: K.rotary_embedding(qv, kpe, qout, pos, cs)], min_calls=20),
                         m=m, n=H, k=64, flops=3 * m * (H + 1) * 64, bytes=4 * m * (H + 1) * 64 + m * 64 * 4 + 4 * m)
                cache = torch.randn(m, 64, 576, device=dev, dtype=bf)
                slot = torch.randint(0, 64, (m,), device=dev, dtype=torch.int64)
                emit("kv_write", "bf16", time_graph([lambda: K.concat_and_cache_mla(ko, qkv[:, 2048:], cache, slot)],
                                                    min_calls=20),
                     m=m, n=576, k=0, flops=0, bytes=4 * m * 576 + 8 * m)
                logits = torch.randn(m, 384, device=dev, dtype=bf)
                bias = torch.randn(384, device=dev) * 0.1
                ids = torch.empty(m, 8, device=dev, dtype=torch.int32)
                wts = torch.empty(m, 8, device=dev, dtype=torch.float32)
                emit("router_topk", "bf16", time_graph([lambda: K.topk_sigmoid(logits, bias, ids, wts)], min_calls=20),
                     m=m, n=384, k=8, flops=13 * m * 384, bytes=2 * m * 384 + 4 * 384 + 8 * m * 8)
                lg = torch.randn(m, VOCAB, device=dev, dtype=bf)
                emit("sampling", "bf16", time_graph([lambda: torch.argmax(lg, dim=-1)], min_calls=20),
                     m=m, n=VOCAB, k=0, flops=m * VOCAB, bytes=2 * m * VOCAB + 8 * m)
                vloc = VOCAB // 2
                table = torch.randn(vloc, HID, device=dev, dtype=bf)
                tok = torch.randint(0, vloc, (m,), device=dev, dtype=torch.int64)
                emb = torch.empty(m, HID, device=dev, dtype=bf)
                emit("embedding", "bf16", time_graph([lambda: K.vocab_parallel_embedding(tok, table, emb, 0)], min_calls=20),
                     m=m, n=HID, k=vloc, flops=0, bytes=4 * m * HID + 8 * m)
                del table, lg
            guard(f'small m={m}', _body)
        inter = sorted({2048 // t for t in tps} | {18432 // t for t in tps} | {2048, 256})
        for n in inter:
            for m in (Ms + ([1024, 2048, 4096] if not args.smoke else [512])):
                g = torch.randn(m, 2 * n, device=dev, dtype=bf)
                o = torch.empty(m, n, device=dev, dtype=bf)
                emit("act_silu_mul", "bf16", time_graph([lambda: K.silu_and_mul(g, out=o)], min_calls=20),
                     m=m, n=n, k=0, flops=5 * m * n, bytes=6 * m * n)
        log("small kernels done")
        torch.cuda.empty_cache()

    # ------------------------------------------------------------------ BF16 GEMMs (cuBLAS)
    if want("gemm_bf16"):
        shapes = set()  # (n, k, batch)
        for tp in tps:
            H = 64 // tp
            shapes |= {(2112, HID, 1), (384, HID, 1),
                       (64 * 192 // tp, 1536, 1),          # q_b
                       (64 * 256 // tp, 512, 1),           # kv_b (non-absorbed, prefill path)
                       (512, 128, H), (128, 512, H),        # W_UK, W_UV (bmm, batch = heads/rank)
                       (HID, 64 * 128 // tp, 1),           # o_proj
                       (2 * 2048 // tp, HID, 1), (HID, 2048 // tp, 1),      # shared expert
                       (2 * 18432 // tp, HID, 1), (HID, 18432 // tp, 1),    # dense layer 0
                       (VOCAB // tp, HID, 1)}             # lm_head
        if args.smoke:
            shapes = {(2112, HID, 1), (512, 128, 32), (VOCAB // 2, HID, 1)}
        for (n, k, b) in sorted(shapes):
            def _body(n=n, k=k, b=b):
                wbytes = n * k * b * 2
                nc = copies_for(wbytes)
                if b == 1:
                    ws = [torch.randn(n, k, device=dev, dtype=bf) for _ in range(nc)]
                else:
                    ws = [torch.randn(b, k, n, device=dev, dtype=bf) for _ in range(nc)]
                for m in Ms:
                    if b == 1:
                        x = torch.randn(m, k, device=dev, dtype=bf)
                        fns = [lambda w=w: F.linear(x, w) for w in ws]
                    else:
                        x = torch.randn(b, m, k, device=dev, dtype=bf)
                        fns = [lambda w=w: torch.bmm(x, w) for w in ws]
                    res = time_graph(fns)
                    emit("gemm_bf16", "bf16", res, m=m, n=n, k=k, batch=b,
                         flops=2 * m * n * k * b, bytes=2 * b * (m * k + k * n + m * n))
                log(f"gemm n={n} k={k} batch={b} copies={nc} last m={Ms[-1]}: {res[0]:.1f} us")
                del ws
                torch.cuda.empty_cache()
            guard(f'gemm n={n} k={k} b={b}', _body)

    # ------------------------------------------------------------------ MLA decode attention
    if want("attention"):
        max_elems = max(batches) * max(ctxs) * 576
        pool = torch.randn(max_elems, device=dev, dtype=bf)
        scale = 1.0 / math.sqrt(192)
        for H in heads_list:
            def _body(H=H):
                for b in batches:
                    ql = torch.randn(H, b, 512, device=dev, dtype=bf)
                    qp = torch.randn(b, H, 64, device=dev, dtype=bf)
                    o = torch.empty(H, b, 512, device=dev, dtype=bf)
                    att = K.MlaDecode(b, H, max(ctxs), dev)
                    for c in ctxs:
                        S = b * c * 576
                        nc = max(1, min(max_elems // S, math.ceil(ROTATE_BYTES / (2 * S))))
                        kvs = [pool[i * S:(i + 1) * S].view(b, c, 576) for i in range(nc)]
                        fns = [lambda kv=kv, c=c: att(ql, qp, kv, c, o, scale) for kv in kvs]
                        res = time_graph(fns)
                        emit("attention_mla_decode", "bf16", res, m=b, n=H, k=576, batch=b, context=c,
                             flops=2 * b * H * c * (576 + 512),
                             bytes=2 * b * c * 576 + 2 * b * H * 576 + 2 * b * H * 512)
                    log(f"attention H={H} b={b} ctx={ctxs[-1]}: {res[0]:.1f} us")
            guard(f'attention H={H}', _body)
        del pool
        torch.cuda.empty_cache()

    # ------------------------------------------------------------------ MoE grouped BF16 (torch._grouped_mm)
    if want("moe_grouped_bf16"):
        E, TOPK = 384, 8
        shapes = []
        for tp in tps:
            shapes += [(2 * 2048 // tp, HID), (HID, 2048 // tp)]
        gen = torch.Generator(device=dev)
        gen.manual_seed(7)
        for (n, k) in shapes:
            def _body(n=n, k=k):
                W = torch.randn(E, n, k, device=dev, dtype=bf)
                Wt = W.transpose(-2, -1)
                for m in Ms:
                    rows = m * TOPK
                    xs = torch.randn(rows, k, device=dev, dtype=bf)
                    fns, distinct = [], []
                    for _ in range(8):
                        ids = torch.rand(m, E, device=dev, generator=gen).topk(TOPK, dim=-1).indices
                        cnt = torch.bincount(ids.flatten(), minlength=E)
                        offs = torch.cumsum(cnt, 0).to(torch.int32)
                        distinct.append(int((cnt > 0).sum().item()))
                        fns.append(lambda offs=offs: torch._grouped_mm(xs, Wt, offs=offs))
                    ex = round(sum(distinct) / len(distinct))
                    res = time_graph(fns)
                    emit("moe_grouped_bf16", "bf16", res, m=m, n=n, k=k, experts=ex, batch=m,
                         flops=2 * rows * n * k, bytes=2 * (ex * n * k + rows * k + rows * n))
                log(f"moe n={n} k={k} m={Ms[-1]}: {res[0]:.1f} us")
                del W, Wt
                torch.cuda.empty_cache()
            guard(f'moe n={n} k={k}', _body)

    # ------------------------------------------------------------------ INT4 weight-only GEMM (tinygemm)
    if want("gemm_int4"):
        shapes = set()
        for tp in tps:
            shapes |= {(2 * 2048 // tp, HID), (HID, 2048 // tp)}
        if not args.smoke:
            shapes |= {(2 * 18432 // 8, HID), (HID, 18432 // 8)}
        for (n, k) in sorted(shapes):
            for gs in [32, 128]:
                def _body(gs=gs):
                    if k % gs:
                        return
                    ok = False
                    for ikt in [8, 4, 2]:
                        if k % (ikt * 16):
                            continue
                        try:
                            raw = torch.randint(0, 256, (n, k // 2), device=dev, dtype=torch.uint8)
                            pk = torch._convert_weight_to_int4pack(raw, ikt)
                            sz = (torch.rand(k // gs, n, 2, device=dev, dtype=bf) * 0.02)
                            torch._weight_int4pack_mm(torch.randn(1, k, device=dev, dtype=bf), pk, gs, sz)
                            torch.cuda.synchronize()
                            ok = True
                            break
                        except Exception as e:  # noqa: BLE001
                            log(f"int4 pack n={n} k={k} ikt={ikt} failed: {e!r}"[:300])
                    if not ok:
                        return
                    wb = n * k // 2 + (k // gs) * n * 4
                    nc = copies_for(wb)
                    ws = [(torch._convert_weight_to_int4pack(
                        torch.randint(0, 256, (n, k // 2), device=dev, dtype=torch.uint8), ikt),
                        torch.rand(k // gs, n, 2, device=dev, dtype=bf) * 0.02) for _ in range(nc)]
                    for m in Ms:
                        x = torch.randn(m, k, device=dev, dtype=bf)
                        fns = [lambda p=p, s=s: torch._weight_int4pack_mm(x, p, gs, s) for p, s in ws]
                        res = time_graph(fns)
                        emit("gemm_int4", "int4", res, m=m, n=n, k=k, group_size=gs, batch=1,
                             flops=2 * m * n * k, bytes=wb + 2 * m * k + 2 * m * n)
                    log(f"int4 n={n} k={k} g={gs} m={Ms[-1]}: {res[0]:.1f} us")
                    del ws
                    torch.cuda.empty_cache()
                guard(f'int4 n={n} k={k} gs={gs}', _body)

    out.close()
    log(f"microbench done in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
