#!/usr/bin/env python3
"""Reference Kimi-K2.5-shaped decode step, tensor-parallel over all GPUs of the host.

Real dimensions (hidden 7168, 64-head MLA with q_lora 1536 / kv_lora 512 / nope 128 / rope 64 /
v 128, 384 routed experts top-8 sigmoid+bias routing, 1 shared expert, layer 0 dense with
intermediate 18432, vocab 163840), random BF16 weights, random token ids, a latent KV cache
(576 per token, replicated on every rank) filled to the context length.  --layers N builds layer 0
(dense) + N-1 MoE layers.  One process per GPU (torch.distributed, NCCL); one fresh process group
per NCCL setting; the whole step is captured in one CUDA graph per (batch, context).

Per (batch, context, setting) it writes one row of reference_steps.csv
  nranks,tp,layers,batch,context,setting,graphs,median_us,p10_us,p90_us,reps,trace_file_rank0
and one gzipped Kineto trace per rank of 3 profiled replays
  refstep_b{B}_c{ctx}_{setting}_rank{r}.{time_ns}.pt.trace.json.gz
The exact kernel sequence is documented in data/README.md.
"""
import argparse
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, free_port, log, quantiles, run_group, set_nccl_safety_env  # noqa: E402

COLS = ["nranks", "tp", "layers", "batch", "context", "setting", "graphs", "median_us", "p10_us",
        "p90_us", "reps", "trace_file_rank0"]
SETTINGS = {
    "default": {},
    "ll_ring": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
    "p2p_off": {"NCCL_P2P_DISABLE": "1"},
}
HID, VOCAB, NH = 7168, 163840, 64
Q_LORA, KV_LORA, NOPE, ROPE, VDIM = 1536, 512, 128, 64, 128
N_EXP, TOPK, MOE_I, DENSE_I = 384, 8, 2048, 18432



class Model:
    def __init__(self, torch, tp, rank, layers, dev):
        bf = torch.bfloat16
        g = torch.Generator(device=dev)
        g.manual_seed(1000 + rank)

        def w(*shape, fan_in=None):
            t = torch.randn(*shape, device=dev, dtype=bf, generator=g)
            return t.mul_(1.0 / math.sqrt(fan_in if fan_in else shape[-1]))

        def nw(n):
            return (torch.rand(n, device=dev, dtype=bf, generator=g) * 0.2 + 0.9)
        self.tp, self.rank = tp, rank
        self.hl = NH // tp
        self.vloc = VOCAB // tp
        self.embed = torch.randn(self.vloc, HID, device=dev, dtype=bf, generator=g)
        self.layers = []
        for li in range(layers):
            L = dict(
                ln_in=nw(HID), qkv_a=w(Q_LORA + KV_LORA + ROPE, HID), q_norm=nw(Q_LORA), kv_norm=nw(KV_LORA),
                q_b=w(self.hl * (NOPE + ROPE), Q_LORA),
                w_uk=w(self.hl, NOPE, KV_LORA, fan_in=NOPE), w_uv=w(self.hl, KV_LORA, VDIM, fan_in=KV_LORA),
                o=w(HID, self.hl * VDIM, fan_in=NH * VDIM), ln_post=nw(HID))
            if li == 0:
                L["gu"] = w(2 * DENSE_I // tp, HID)
                L["d"] = w(HID, DENSE_I // tp, fan_in=DENSE_I)
            else:
                L["gate"] = w(N_EXP, HID)
                L["bias"] = torch.rand(N_EXP, device=dev, generator=g) * 0.05
                w13 = w(N_EXP, 2 * MOE_I // tp, HID)
                w2 = w(N_EXP, HID, MOE_I // tp, fan_in=MOE_I)
                L["w13t"] = w13.transpose(-2, -1)   # [E, K, N] column-major view for torch._grouped_mm
                L["w2t"] = w2.transpose(-2, -1)
                L["sgu"] = w(2 * MOE_I // tp, HID)
                L["sd"] = w(HID, MOE_I // tp, fan_in=MOE_I)
            self.layers.append(L)
        self.ln_f = nw(HID)
        self.lm_head = w(self.vloc, HID)

    @staticmethod
    def weight_bytes(tp, layers):
        hl = NH // tp
        per_attn = ((Q_LORA + KV_LORA + ROPE) * HID + hl * (NOPE + ROPE) * Q_LORA + hl * NOPE * KV_LORA
                    + hl * KV_LORA * VDIM + HID * hl * VDIM) * 2
        dense = 3 * DENSE_I // tp * HID * 2
        moe = (N_EXP * 3 * MOE_I // tp * HID + 3 * MOE_I // tp * HID + N_EXP * HID) * 2
        return layers * per_attn + dense + (layers - 1) * moe + 2 * VOCAB // tp * HID * 2


def worker(rank, world, setting, port, a):
    set_nccl_safety_env()
    for k in ["NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_DISABLE"]:
        os.environ.pop(k, None)
    os.environ.update(SETTINGS[setting])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function
    import kernels as K

    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    tp = world
    bf = torch.bfloat16
    t0 = time.time()
    free0, total = torch.cuda.mem_get_info()
    wbytes = Model.weight_bytes(tp, a.layers)
    model = Model(torch, tp, rank, a.layers, dev)
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    # KV pools: one flat pool per layer, sized for the largest (batch x context) that fits
    want = max(b * c for b in a.batches for c in a.contexts) * 576
    budget = free1 - a.reserve_gb * 2**30
    per_layer = min(want, int(budget // (2 * a.layers)))
    per_layer = max(per_layer, 0)
    kv = [torch.randn(per_layer, device=dev, dtype=bf) for _ in range(a.layers)]
    torch.cuda.synchronize()
    if rank == 0:
        log(f"[{setting}] tp={tp} layers={a.layers}: weights {wbytes / 1e9:.1f} GB (est), "
            f"free before {free0 / 1e9:.1f} after weights {free1 / 1e9:.1f} GB; KV {a.layers} x "
            f"{per_layer * 2 / 1e9:.2f} GB (want {want * 2 / 1e9:.2f}); init {time.time() - t0:.1f} s")
    # vLLM's _v_up_proj writes the W_UV bmm straight into the transposed o_proj input; fall back to
    # bmm + copy if this torch build refuses a non-contiguous out=.
    try:
        t_a = torch.randn(2, 3, 512, device=dev, dtype=bf)
        t_w = torch.randn(2, 512, 128, device=dev, dtype=bf)
        t_o = torch.empty(3, 2, 128, device=dev, dtype=bf)
        torch.bmm(t_a, t_w, out=t_o.transpose(0, 1))
        torch.cuda.synchronize()
        bmm_out_t = torch.allclose(t_o.transpose(0, 1).float(), torch.bmm(t_a, t_w).float(), atol=1e-1, rtol=1e-2)
    except Exception as e:  # noqa: BLE001
        log(f"bmm out= transposed not supported: {e!r}"[:200])
        bmm_out_t = False
    if rank == 0:
        log(f"W_UV bmm writes transposed output directly: {bmm_out_t}")
    cos_sin = K.make_cos_sin(max(a.contexts) + 1, device=dev)
    scale = 1.0 / math.sqrt(NOPE + ROPE)
    hl = model.hl
    csv = CsvOut(a.csv, COLS, append=True) if rank == 0 else None
    cur = torch.cuda.current_stream()
    aux = torch.cuda.Stream()

    def build_step(B, ctx):
        S = {}
        gen = torch.Generator(device=dev)
        gen.manual_seed(77 + B)
        S["ids"] = torch.randint(0, VOCAB, (B,), device=dev, generator=gen)  # same on every rank
        S["pos"] = torch.full((B,), ctx - 1, device=dev, dtype=torch.int32)
        S["slot"] = torch.full((B,), ctx - 1, device=dev, dtype=torch.int64)
        S["x"] = torch.empty(B, HID, device=dev, dtype=bf)
        S["tok"] = torch.empty(B, device=dev, dtype=torch.int64)
        S["caches"] = [kv[l][:B * ctx * 576].view(B, ctx, 576) for l in range(a.layers)]
        S["attn"] = K.MlaDecode(B, hl, ctx, dev)
        S["rids"] = torch.empty(B, TOPK, device=dev, dtype=torch.int32)
        S["rw"] = torch.empty(B, TOPK, device=dev, dtype=torch.float32)
        S["offs"] = torch.empty(N_EXP, device=dev, dtype=torch.int32)
        S["src"] = torch.empty(B * TOPK, device=dev, dtype=torch.int32)
        S["inv"] = torch.empty(B * TOPK, device=dev, dtype=torch.int32)
        S["sgu"] = torch.empty(B, 2 * MOE_I // tp, device=dev, dtype=bf)
        S["sact"] = torch.empty(B, MOE_I // tp, device=dev, dtype=bf)
        S["sh"] = torch.empty(B, HID, device=dev, dtype=bf)
        S["gather"] = torch.empty(tp * B, model.vloc, device=dev, dtype=bf)

        def step():
            # the stream current at call time: the capture stream under torch.cuda.graph
            cur = torch.cuda.current_stream()
            x = S["x"]
            K.vocab_parallel_embedding(S["ids"], model.embed, x, rank * model.vloc)
            dist.all_reduce(x)
            residual = x
            h = None
            for li, L in enumerate(model.layers):
                if li == 0:
                    h = K.rmsnorm(x, L["ln_in"])
                else:
                    K.fused_add_rmsnorm(h, residual, L["ln_in"])
                # ---- MLA attention
                qkv = F.linear(h, L["qkv_a"])                               # [B, 2112] replicated
                q_c = torch.empty(B, Q_LORA, device=dev, dtype=bf)
                kv_c = torch.empty(B, KV_LORA, device=dev, dtype=bf)
                K.fused_q_kv_rmsnorm(qkv, L["q_norm"], L["kv_norm"], q_c, kv_c)
                q = F.linear(q_c, L["q_b"]).view(B, hl, NOPE + ROPE)       # [B, hl, 192]
                k_pe = qkv[:, Q_LORA + KV_LORA:]
                q_pe = torch.empty(B, hl, ROPE, device=dev, dtype=bf)
                K.rotary_embedding(q[:, :, NOPE:], k_pe, q_pe, S["pos"], cos_sin)
                cache = S["caches"][li]
                K.concat_and_cache_mla(kv_c, k_pe, cache, S["slot"])
                q_lat = torch.bmm(q[:, :, :NOPE].transpose(0, 1), L["w_uk"])  # [hl, B, 512]
                att = torch.empty(hl, B, KV_LORA, device=dev, dtype=bf)
                S["attn"](q_lat, q_pe, cache, ctx, att, scale)
                if bmm_out_t:
                    o = torch.empty(B, hl, VDIM, device=dev, dtype=bf)
                    torch.bmm(att, L["w_uv"], out=o.transpose(0, 1))
                else:
                    o = torch.bmm(att, L["w_uv"]).transpose(0, 1).contiguous()
                y = F.linear(o.view(B, hl * VDIM), L["o"])
                dist.all_reduce(y)
                K.fused_add_rmsnorm(y, residual, L["ln_post"])
                h2 = y
                # ---- MLP / MoE
                if li == 0:
                    z = F.linear(K.silu_and_mul(F.linear(h2, L["gu"])), L["d"])
                else:
                    logits = F.linear(h2, L["gate"])                        # [B, 384]
                    K.topk_sigmoid(logits, L["bias"], S["rids"], S["rw"])
                    use_aux = B <= 256
                    if use_aux:
                        aux.wait_stream(cur)
                        with torch.cuda.stream(aux):
                            torch.mm(h2, L["sgu"].t(), out=S["sgu"])
                            K.silu_and_mul(S["sgu"], out=S["sact"])
                            torch.mm(S["sact"], L["sd"].t(), out=S["sh"])
                    else:
                        torch.mm(h2, L["sgu"].t(), out=S["sgu"])
                        K.silu_and_mul(S["sgu"], out=S["sact"])
                        torch.mm(S["sact"], L["sd"].t(), out=S["sh"])
                    K.moe_align(S["rids"].view(-1), N_EXP, S["offs"], S["src"], S["inv"])
                    xs = h2.index_select(0, S["src"])                       # [B*8, 7168]
                    g1 = torch._grouped_mm(xs, L["w13t"], offs=S["offs"])   # [B*8, 2*I/tp]
                    act = K.silu_and_mul(g1)
                    g2 = torch._grouped_mm(act, L["w2t"], offs=S["offs"])  # [B*8, 7168]
                    if use_aux:
                        cur.wait_stream(aux)
                    z = torch.empty(B, HID, device=dev, dtype=bf)
                    K.moe_unpermute_sum(g2, S["inv"], S["rw"], S["sh"], z)
                dist.all_reduce(z)
                h = z
            K.fused_add_rmsnorm(h, residual, model.ln_f)
            lg = F.linear(h, model.lm_head)                                 # [B, V/tp]
            dist.all_gather_into_tensor(S["gather"], lg)
            full = S["gather"].view(tp, B, model.vloc).permute(1, 0, 2).reshape(B, VOCAB)
            S["tok"].copy_(full.argmax(dim=-1))
        return S, step

    def timed(run, n):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for e0, e1 in evs:
            e0.record()
            run()
            e1.record()
        torch.cuda.synchronize()
        return [e0.elapsed_time(e1) * 1e3 for e0, e1 in evs]

    base = dict(nranks=world, tp=tp, layers=a.layers, setting=setting)
    for B in a.batches:
        for ctx in a.contexts:
            if B * ctx * 576 > per_layer:
                if rank == 0:
                    log(f"[{setting}] skip B={B} ctx={ctx}: KV does not fit")
                continue
            try:
                tc = time.time()
                S, step = build_step(B, ctx)
                for _ in range(2):
                    step()
                torch.cuda.synchronize()
                tok_eager = S["tok"].clone()
                side = torch.cuda.Stream()
                side.wait_stream(cur)
                with torch.cuda.stream(side):
                    step()
                cur.wait_stream(side)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                for _ in range(3):
                    g.replay()
                torch.cuda.synchronize()
                same = torch.equal(tok_eager, S["tok"])
                per = timed(g.replay, a.replays)
                med, p10, p90 = quantiles(per)
                # eager timing for selected points (default setting only)
                if setting == a.eager_setting and (B, ctx) in a.eager_points:
                    pe = timed(step, max(10, a.replays // 2))
                    em, e10, e90 = quantiles(pe)
                    if csv:
                        csv.row(dict(base, batch=B, context=ctx, graphs=0, median_us=em, p10_us=e10,
                                     p90_us=e90, reps=len(pe), trace_file_rank0=""))
                        log(f"[{setting}] B={B} ctx={ctx} eager median {em:.0f} us")
                # profile 3 replays
                tname = ""
                if a.traces:
                    torch.cuda.synchronize()
                    dist.barrier()
                    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                 record_shapes=False, with_stack=False, profile_memory=False) as prof:
                        for _ in range(3):
                            with record_function(f"execute_context_0(0)_generation_{B}({B})"):
                                g.replay()
                                torch.cuda.synchronize()
                            prof.step()
                    tname = f"refstep_b{B}_c{ctx}_{setting}_rank{rank}.{time.time_ns()}.pt.trace.json.gz"
                    try:
                        prof.export_chrome_trace(os.path.join(a.traces, tname))
                    except Exception as e:  # noqa: BLE001
                        log(f"trace export failed: {e!r}"[:300])
                        tname = ""
                    del prof
                    names = [None] * world
                    dist.all_gather_object(names, tname)
                    tname = names[0]
                if csv:
                    csv.row(dict(base, batch=B, context=ctx, graphs=1, median_us=med, p10_us=p10, p90_us=p90,
                                 reps=len(per), trace_file_rank0=tname))
                    log(f"[{setting}] B={B:4d} ctx={ctx:6d} graph median {med:9.1f} us p10 {p10:9.1f} "
                        f"p90 {p90:9.1f}  tokens(graph==eager)={same} tok0={int(S['tok'][0])} "
                        f"({time.time() - tc:.1f} s)")
                del g, S, step
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001
                log(f"[{setting}] rank {rank} B={B} ctx={ctx} FAILED: {e!r}"[:500])
                traceback.print_exc()
                raise
    if csv:
        csv.close()
    dist.barrier()
    dist.destroy_process_group()


def parse_points(s):
    pts = set()
    for p in s.split(","):
        if p:
            b, c = p.split("x")
            pts.add((int(b), int(c)))
    return pts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder for reference_steps.csv")
    ap.add_argument("--traces", default="", help="folder for traces ('' = no traces)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batches", default="1,4,16,64,128,256")
    ap.add_argument("--contexts", default="1024,8192,32768")
    ap.add_argument("--settings", default="default,ll_ring,p2p_off")
    ap.add_argument("--eager-points", default="1x1024,64x8192")
    ap.add_argument("--eager-setting", default="default")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--reserve-gb", type=float, default=8.0)
    ap.add_argument("--timeout-per-setting", type=float, default=400.0)
    a = ap.parse_args()
    set_nccl_safety_env()
    import torch
    import torch.multiprocessing as mp
    world = torch.cuda.device_count()
    a.batches = [int(x) for x in a.batches.split(",")]
    a.contexts = [int(x) for x in a.contexts.split(",")]
    a.eager_points = parse_points(a.eager_points)
    os.makedirs(a.out, exist_ok=True)
    if a.traces:
        os.makedirs(a.traces, exist_ok=True)
    a.csv = os.path.join(a.out, "reference_steps.csv")
    if os.path.exists(a.csv):
        os.remove(a.csv)
    log(f"refstep: world={world} layers={a.layers} batches={a.batches} contexts={a.contexts} "
        f"settings={a.settings}; est. weights/rank {Model.weight_bytes(world, a.layers) / 1e9:.1f} GB")
    ctx = mp.get_context("spawn")
    for st in a.settings.split(","):
        t0 = time.time()
        port = free_port()
        codes, to = run_group(ctx, worker, world, lambda r: (r, world, st, port, a), a.timeout_per_setting)
        log(f"setting {st}: {time.time() - t0:.1f} s, exitcodes={codes}" + (" TIMEOUT" if to else ""))

if __name__ == "__main__":
    main()
