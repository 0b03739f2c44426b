#!/usr/bin/env python3
"""Split-KV MLA decode attention with a BF16 or an FP8 (e4m3) latent KV cache, timed per dtype.

Why: the RTX PRO 6000 MLA table (AIConfigurator) has BF16-KV rows only, and an FP8 KV cache
cannot be priced by halving bytes: a split-KV decode kernel at small batch is bound by its split
structure (one program per head block x split x sequence, each reading a short run of tokens,
then a reduce), not by DRAM bytes.  This script measures the FP8/BF16 ratio on the structure of
vLLM's TRITON_MLA backend (stage 1 over KV splits + stage 2 reduce; docs/sources.md §3.2):

  * stage 1: grid (head blocks, KV splits, batch); scores over the 512-wide latent plus the
    64-wide rope part; the latent tile is also the value (weight absorption).  The FP8 variant
    loads e4m3 and dequantises in the kernel with the cache's per-tensor scale (vLLM's fp8 KV
    cache: one k_scale per layer), then runs the same BF16 dots;
    A second FP8 variant, `fp8_direct`, converts e4m3 straight to BF16 and folds the scale into
    the scores and the output (one conversion per element): what a tuned kernel could do;
  * stage 2: the log-sum-exp merge of the splits;
  * split count as TRITON_MLA picks it: min(next_pow2(max_seq_len // 512), 2 x SM count), >= 1.

Each (dtype, heads, batch, KV length) point is timed by CUDA-graph replay of >= 8 calls, the KV
cache rotated over >= 256 MB of distinct buffers so that L2 (60 MB) cannot serve it (in a real
step each layer's KV is read once).  Correctness: every variant is checked against a float64
reference on random inputs (BF16 tolerance 2e-2, FP8 against the dequantised cache 2e-2).

Writes (under --out):
  mla_kv_dtype.csv   kernel,kv_dtype,num_heads,batch,kv_len,num_splits,kv_bytes,median_us,p10_us,p90_us,samples
  mla_kv_dtype_check.txt   the correctness check per dtype
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, ROTATE_BYTES, log, time_graph  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import kernels as K  # noqa: E402  (stage-2 reduce shared with the reference step)

D_LAT = 512
D_PE = 64
D_KV = D_LAT + D_PE
COLS = ["kernel", "kv_dtype", "num_heads", "batch", "kv_len", "num_splits", "kv_bytes",
        "median_us", "p10_us", "p90_us", "samples"]


@triton.jit
def stage1_kernel(QN, QP, KV, MID_O, MID_LSE, sm_scale, kv_scale, seq_len, H, tokens_per_split,
                  s_qn_h, s_qn_b, s_qp_b, s_qp_h, s_kv_b, s_kv_t,
                  s_mo_b, s_mo_h, s_mo_s, s_ml_b, s_ml_h,
                  KV_MODE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                  D_LAT: tl.constexpr, D_PE: tl.constexpr):
    hb = tl.program_id(0)
    sp = tl.program_id(1)
    b = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mh = offs_h < H
    offs_d = tl.arange(0, D_LAT)
    offs_p = tl.arange(0, D_PE)
    q = tl.load(QN + offs_h[:, None] * s_qn_h + b * s_qn_b + offs_d[None, :], mask=mh[:, None], other=0.0)
    qp = tl.load(QP + b * s_qp_b + offs_h[:, None] * s_qp_h + offs_p[None, :], mask=mh[:, None], other=0.0)
    start = sp * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D_LAT], tl.float32)
    kv_base = KV + b.to(tl.int64) * s_kv_b
    qk_scale = sm_scale * 1.4426950408889634
    if KV_MODE == 2:
        # The scale folded into the scores and the output: one conversion per element.
        qk_scale = qk_scale * kv_scale
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mn = offs_n < end
        ptr = kv_base + offs_n[:, None].to(tl.int64) * s_kv_t
        kv = tl.load(ptr + offs_d[None, :], mask=mn[:, None], other=0.0)
        kp = tl.load(ptr + D_LAT + offs_p[None, :], mask=mn[:, None], other=0.0)
        if KV_MODE == 1:
            kv = (kv.to(tl.float32) * kv_scale).to(tl.bfloat16)
            kp = (kp.to(tl.float32) * kv_scale).to(tl.bfloat16)
        elif KV_MODE == 2:
            kv = kv.to(tl.bfloat16)
            kp = kp.to(tl.bfloat16)
        s = tl.dot(q, tl.trans(kv)) + tl.dot(qp, tl.trans(kp))
        s = tl.where(mn[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), kv)
        m_i = m_new
    ok = l_i > 0
    l_safe = tl.where(ok, l_i, 1.0)
    lse = tl.where(ok, m_i + tl.log2(l_safe), float("-inf"))
    o = acc / l_safe[:, None]
    if KV_MODE == 2:
        o = o * kv_scale
    tl.store(MID_O + b * s_mo_b + offs_h[:, None] * s_mo_h + sp * s_mo_s + offs_d[None, :], o, mask=mh[:, None])
    tl.store(MID_LSE + b * s_ml_b + offs_h * s_ml_h + sp, lse, mask=mh)


def triton_mla_splits(max_seq_len, n_sm):
    """TRITON_MLA's split count (docs/sources.md §3.2)."""
    return max(1, min(triton.next_power_of_2(max(1, max_seq_len // 512)), 2 * n_sm))


class Decode:
    def __init__(self, batch, heads, seq_len, n_sm, device, mode):
        self.mode = mode
        self.block_h = 16
        self.block_n = 32
        self.splits = triton_mla_splits(seq_len, n_sm)
        self.tps = triton.cdiv(seq_len, self.splits)
        self.seq_len = seq_len
        self.mid_o = torch.empty((batch, heads, self.splits, D_LAT), dtype=torch.float32, device=device)
        self.mid_lse = torch.empty((batch, heads, self.splits), dtype=torch.float32, device=device)

    def __call__(self, q_lat, q_pe, kv, kv_scale, out, sm_scale):
        h, b, _ = q_lat.shape
        mo, ml = self.mid_o, self.mid_lse
        grid = (triton.cdiv(h, self.block_h), self.splits, b)
        stage1_kernel[grid](
            q_lat, q_pe, kv, mo, ml, sm_scale, kv_scale, self.seq_len, h, self.tps,
            q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), kv.stride(0), kv.stride(1),
            mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            KV_MODE=self.mode, BLOCK_H=self.block_h, BLOCK_N=self.block_n,
            D_LAT=D_LAT, D_PE=D_PE, num_warps=8, num_stages=2)
        K.mla_decode_stage2_reduce_kernel[(h, b)](
            mo, ml, out, self.splits, mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            out.stride(0), out.stride(1), D_LAT=D_LAT, num_warps=4)
        return out


def make_kv(batch, seq_len, dtype, device, scale):
    kv = torch.randn((batch, seq_len, D_KV), dtype=torch.bfloat16, device=device)
    if dtype == "fp8":
        return (kv.float() / scale).to(torch.float8_e4m3fn)
    return kv


MODES = {"bf16": 0, "fp8": 1, "fp8_direct": 2}


def check(variant, n_sm, device, out_lines):
    dtype = "bf16" if variant == "bf16" else "fp8"
    mode = MODES[variant]
    torch.manual_seed(1234)
    worst = 0.0
    for batch, heads, seq_len in [(1, 8, 1000), (3, 8, 4097), (8, 16, 2048), (2, 8, 20000)]:
        scale = 0.05 if dtype == "fp8" else 1.0
        kv = make_kv(batch, seq_len, dtype, device, scale)
        kv_deq = kv.float() * scale if dtype == "fp8" else kv.float()
        q_lat = torch.randn((heads, batch, D_LAT), dtype=torch.bfloat16, device=device)
        q_pe = torch.randn((batch, heads, D_PE), dtype=torch.bfloat16, device=device)
        out = torch.full((heads, batch, D_LAT), float("nan"), dtype=torch.bfloat16, device=device)
        sm_scale = 1.0 / (192 ** 0.5)
        Decode(batch, heads, seq_len, n_sm, device, mode)(q_lat, q_pe, kv, scale, out, sm_scale)
        torch.cuda.synchronize()
        k = kv_deq.double()
        q = torch.cat([q_lat.transpose(0, 1).double(), q_pe.double()], dim=-1)
        s = torch.einsum("bhd,btd->bht", q, k) * sm_scale
        p = torch.softmax(s, dim=-1)
        ref = torch.einsum("bht,btd->bhd", p, k[..., :D_LAT]).transpose(0, 1)
        o = out.double()
        if torch.isnan(o).any():
            raise SystemExit(f"{variant}: unwritten output at batch {batch}, heads {heads}, len {seq_len}")
        err = ((o - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        out_lines.append(f"{variant} batch={batch} heads={heads} kv_len={seq_len}: rel err {err:.2e}")
    if worst > 2e-2:
        raise SystemExit(f"{variant}: relative error {worst:.2e} above 2e-2")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", default="8,16")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--kv-lens", default="1024,2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--max-kv-gib", type=float, default=40.0,
                    help="skip a (batch, len) whose BF16 cache exceeds this")
    args = ap.parse_args()
    device = "cuda"
    props = torch.cuda.get_device_properties(0)
    n_sm = props.multi_processor_count
    os.makedirs(args.out, exist_ok=True)
    lines = [f"gpu: {props.name}, {n_sm} SMs; torch {torch.__version__}; triton {triton.__version__}"]
    for variant in MODES:
        w = check(variant, n_sm, device, lines)
        lines.append(f"{variant}: worst relative error {w:.2e} (limit 2e-2)")
    with open(os.path.join(args.out, "mla_kv_dtype_check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))

    csv = CsvOut(os.path.join(args.out, "mla_kv_dtype.csv"), COLS)
    heads_list = [int(x) for x in args.heads.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    lens = [int(x) for x in args.kv_lens.split(",")]
    sm_scale = 1.0 / (192 ** 0.5)
    for seq_len in lens:
        for batch in batches:
            bf16_bytes = batch * seq_len * D_KV * 2
            if bf16_bytes > args.max_kv_gib * 2**30:
                continue
            for dtype in ("bf16", "fp8"):
                elem = 2 if dtype == "bf16" else 1
                variants = ["bf16"] if dtype == "bf16" else ["fp8", "fp8_direct"]
                one = batch * seq_len * D_KV * elem
                n_rot = max(1, min(8, -(-ROTATE_BYTES // one)))
                kvs = [make_kv(batch, seq_len, dtype, device, 0.05) for _ in range(n_rot)]
                for heads, variant in [(h, v) for h in heads_list for v in variants]:
                    q_lat = torch.randn((heads, batch, D_LAT), dtype=torch.bfloat16, device=device)
                    q_pe = torch.randn((batch, heads, D_PE), dtype=torch.bfloat16, device=device)
                    out = torch.empty((heads, batch, D_LAT), dtype=torch.bfloat16, device=device)
                    dec = Decode(batch, heads, seq_len, n_sm, device, MODES[variant])
                    fns = [(lambda kv=kv: dec(q_lat, q_pe, kv, 0.05, out, sm_scale)) for kv in kvs]
                    med, p10, p90, n = time_graph(fns, min_calls=8)
                    csv.row({"kernel": "TRITON_MLA_STRUCTURE", "kv_dtype": variant, "num_heads": heads,
                             "batch": batch, "kv_len": seq_len, "num_splits": dec.splits,
                             "kv_bytes": one, "median_us": med, "p10_us": p10, "p90_us": p90,
                             "samples": n})
                    log(f"{variant} h={heads} b={batch} len={seq_len} splits={dec.splits}: {med:.1f} us")
                del kvs
                torch.cuda.empty_cache()
    csv.close()


if __name__ == "__main__":
    main()
