#!/usr/bin/env python3
"""Split-KV MLA decode attention with 1-4 query tokens per sequence (the speculative verify pass).

Why: in a verify pass every sequence carries 1 + k query tokens, causally masked (token j of the
block sees the context up to itself).  How much that costs over a plain decode step depends on
how the kernel lays the tokens out, not on FLOPs:

  * `rows`: each query token is its own row of the grid (batch x q rows), with its own sequence
    length, as vLLM's Triton MLA decode kernel runs a verify block when the builder expands it
    (the UNIFORM patch of TRITON_MLA used on RTX PRO 6000 boxes; docs/sources.md §8.1-8.2).  Every row
    loops over its own KV span: the KV of a sequence is fetched once per query token from the
    memory system (L2 may absorb the re-reads, which is what this measures).
  * `folded16` / `folded32`: the q tokens folded into the head dimension, one program per tile of
    16 or 32 (token, head) query rows, so the KV span is read once per tile (vLLM's later folding
    Triton kernel reads it once per 16-row tile; FlashMLA-style kernels size the tile to
    q x heads).

Each call is stage 1 over KV splits + the stage-2 log-sum-exp reduce, the split count as
TRITON_MLA picks it: min(next_pow2(max_seq_len // 512), 2 x SMs).  Each (variant, heads, batch,
q, KV length) point is timed by CUDA-graph replay of >= 8 calls with the KV cache rotated over
>= 256 MB of distinct buffers (each layer's KV is read once per step in a real model, so L2 must
not serve one call from the previous one; the re-reads inside one call are real).  Correctness:
every variant at q = 1..4 against a float64 causal reference (relative error limit 2e-2).

Writes (under --out):
  mla_verify.csv        kernel,variant,num_heads,batch,q_len,kv_len,num_splits,kv_bytes,median_us,p10_us,p90_us,samples
  mla_verify_check.txt  the correctness check per variant
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CsvOut, ROTATE_BYTES, log, time_graph  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

D_LAT = 512
D_PE = 64
D_KV = D_LAT + D_PE
COLS = ["kernel", "variant", "num_heads", "batch", "q_len", "kv_len", "num_splits", "kv_bytes",
        "median_us", "p10_us", "p90_us", "samples"]


@triton.jit
def verify_stage1(QN, QP, KV, MID_O, MID_LSE, sm_scale, seq_len, R, H, Q, tokens_per_split,
                  s_qn_r, s_qn_b, s_qp_b, s_qp_r, s_kv_b, s_kv_t,
                  s_mo_b, s_mo_r, s_mo_s, s_ml_b, s_ml_r,
                  ROWS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                  D_LAT: tl.constexpr, D_PE: tl.constexpr):
    # Query rows are indexed r = j * H + h (token j of the verify block, head h); token j sees
    # the first seq_len - Q + j + 1 tokens of its sequence.
    blk = tl.program_id(0)
    sp = tl.program_id(1)
    p = tl.program_id(2)
    if ROWS:
        # One program per (head tile, split, query token): b = p // Q, token j = p % Q.
        b = p // Q
        j = p % Q
        offs_h = blk * BLOCK_H + tl.arange(0, BLOCK_H)
        mr = offs_h < H
        offs_r = j * H + offs_h
        limit_r = tl.zeros([BLOCK_H], tl.int32) + (seq_len - Q + j + 1)
        hi = seq_len - Q + j + 1
    else:
        # One program per (tile of token-head rows, split, sequence): one read of the span.
        b = p
        offs_r = blk * BLOCK_H + tl.arange(0, BLOCK_H)
        mr = offs_r < R
        limit_r = seq_len - Q + offs_r // H + 1
        hi = seq_len
    offs_d = tl.arange(0, D_LAT)
    offs_p = tl.arange(0, D_PE)
    q = tl.load(QN + offs_r[:, None] * s_qn_r + b * s_qn_b + offs_d[None, :], mask=mr[:, None], other=0.0)
    qp = tl.load(QP + b * s_qp_b + offs_r[:, None] * s_qp_r + offs_p[None, :], mask=mr[:, None], other=0.0)
    start = sp * tokens_per_split
    end = tl.minimum(start + tokens_per_split, hi)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D_LAT], tl.float32)
    kv_base = KV + b.to(tl.int64) * s_kv_b
    qk_scale = sm_scale * 1.4426950408889634
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mn = offs_n < end
        ptr = kv_base + offs_n[:, None].to(tl.int64) * s_kv_t
        kv = tl.load(ptr + offs_d[None, :], mask=mn[:, None], other=0.0)
        kp = tl.load(ptr + D_LAT + offs_p[None, :], mask=mn[:, None], other=0.0)
        s = tl.dot(q, tl.trans(kv)) + tl.dot(qp, tl.trans(kp))
        ok = mn[None, :] & (offs_n[None, :] < limit_r[:, None])
        s = tl.where(ok, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        pr = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(pr, 1)
        acc = acc * alpha[:, None] + tl.dot(pr.to(tl.bfloat16), kv)
        m_i = m_new
    ok = l_i > 0
    l_safe = tl.where(ok, l_i, 1.0)
    lse = tl.where(ok, m_i + tl.log2(l_safe), float("-inf"))
    o = acc / l_safe[:, None]
    tl.store(MID_O + b * s_mo_b + offs_r[:, None] * s_mo_r + sp * s_mo_s + offs_d[None, :], o, mask=mr[:, None])
    tl.store(MID_LSE + b * s_ml_b + offs_r * s_ml_r + sp, lse, mask=mr)


@triton.jit
def verify_stage2(MID_O, MID_LSE, OUT, num_splits, s_mo_b, s_mo_r, s_mo_s, s_ml_b, s_ml_r,
                  s_o_r, s_o_b, D_LAT: tl.constexpr):
    r = tl.program_id(0)
    b = tl.program_id(1)
    offs_d = tl.arange(0, D_LAT)
    m = float("-inf")
    for s in range(0, num_splits):
        m = tl.maximum(m, tl.load(MID_LSE + b * s_ml_b + r * s_ml_r + s))
    acc = tl.zeros([D_LAT], tl.float32)
    den = 0.0
    for s in range(0, num_splits):
        lse = tl.load(MID_LSE + b * s_ml_b + r * s_ml_r + s)
        w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - m))
        o = tl.load(MID_O + b * s_mo_b + r * s_mo_r + s * s_mo_s + offs_d)
        acc += w * o
        den += w
    tl.store(OUT + r * s_o_r + b * s_o_b + offs_d, (acc / den).to(OUT.dtype.element_ty))


def triton_mla_splits(max_seq_len, n_sm):
    """TRITON_MLA's split count (docs/sources.md §3.2)."""
    return max(1, min(triton.next_power_of_2(max(1, max_seq_len // 512)), 2 * n_sm))


VARIANTS = {"rows": (True, 16), "folded16": (False, 16), "folded32": (False, 32)}


class Verify:
    def __init__(self, batch, heads, q, seq_len, n_sm, device, variant):
        self.rows, self.block_h = VARIANTS[variant]
        self.block_n = 32
        self.q, self.h, self.r = q, heads, q * heads
        self.splits = triton_mla_splits(seq_len, n_sm)
        self.tps = triton.cdiv(seq_len, self.splits)
        self.seq_len = seq_len
        self.mid_o = torch.empty((batch, self.r, self.splits, D_LAT), dtype=torch.float32, device=device)
        self.mid_lse = torch.empty((batch, self.r, self.splits), dtype=torch.float32, device=device)

    def __call__(self, q_lat, q_pe, kv, out, sm_scale):
        r, b, _ = q_lat.shape
        mo, ml = self.mid_o, self.mid_lse
        if self.rows:
            grid = (triton.cdiv(self.h, self.block_h), self.splits, b * self.q)
        else:
            grid = (triton.cdiv(r, self.block_h), self.splits, b)
        verify_stage1[grid](
            q_lat, q_pe, kv, mo, ml, sm_scale, self.seq_len, r, self.h, self.q, self.tps,
            q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), kv.stride(0), kv.stride(1),
            mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            ROWS=self.rows, BLOCK_H=self.block_h, BLOCK_N=self.block_n,
            D_LAT=D_LAT, D_PE=D_PE, num_warps=8, num_stages=2)
        verify_stage2[(r, b)](
            mo, ml, out, self.splits, mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            out.stride(0), out.stride(1), D_LAT=D_LAT, num_warps=4)
        return out


def check(variant, n_sm, device, lines):
    torch.manual_seed(4321)
    worst = 0.0
    for batch, heads, q, seq_len in [(1, 8, 1, 1000), (2, 8, 4, 4097), (3, 16, 3, 2048), (2, 8, 2, 20000)]:
        kv = torch.randn((batch, seq_len, D_KV), dtype=torch.bfloat16, device=device)
        r = q * heads
        q_lat = torch.randn((r, batch, D_LAT), dtype=torch.bfloat16, device=device)
        q_pe = torch.randn((batch, r, D_PE), dtype=torch.bfloat16, device=device)
        out = torch.full((r, batch, D_LAT), float("nan"), dtype=torch.bfloat16, device=device)
        sm_scale = 1.0 / (192 ** 0.5)
        Verify(batch, heads, q, seq_len, n_sm, device, variant)(q_lat, q_pe, kv, out, sm_scale)
        torch.cuda.synchronize()
        k = kv.double()
        qq = torch.cat([q_lat.transpose(0, 1).double(), q_pe.double()], dim=-1)  # [B, R, 576]
        s = torch.einsum("brd,btd->brt", qq, k) * sm_scale
        tok = torch.arange(seq_len, device=device)
        j = torch.arange(r, device=device) // heads
        allowed = tok[None, :] < (seq_len - q + j + 1)[:, None]
        s = s.masked_fill(~allowed[None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        ref = torch.einsum("brt,btd->brd", p, k[..., :D_LAT]).transpose(0, 1)
        o = out.double()
        if torch.isnan(o).any():
            raise SystemExit(f"{variant}: unwritten output at batch {batch}, q {q}, len {seq_len}")
        err = ((o - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        lines.append(f"{variant} batch={batch} heads={heads} q={q} kv_len={seq_len}: rel err {err:.2e}")
    if worst > 2e-2:
        raise SystemExit(f"{variant}: relative error {worst:.2e} above 2e-2")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", default="8,16")
    ap.add_argument("--q-lens", default="1,2,3,4")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--kv-lens", default="1024,4096,16384,65536,131072")
    ap.add_argument("--variants", default="rows,folded16,folded32")
    ap.add_argument("--max-kv-gib", type=float, default=12.0)
    args = ap.parse_args()
    device = "cuda"
    props = torch.cuda.get_device_properties(0)
    n_sm = props.multi_processor_count
    os.makedirs(args.out, exist_ok=True)
    variants = args.variants.split(",")
    lines = [f"gpu: {props.name}, {n_sm} SMs; torch {torch.__version__}; triton {triton.__version__}"]
    for v in variants:
        w = check(v, n_sm, device, lines)
        lines.append(f"{v}: worst relative error {w:.2e} (limit 2e-2)")
    with open(os.path.join(args.out, "mla_verify_check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))

    csv = CsvOut(os.path.join(args.out, "mla_verify.csv"), COLS)
    heads_list = [int(x) for x in args.heads.split(",")]
    qs = [int(x) for x in args.q_lens.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    lens = [int(x) for x in args.kv_lens.split(",")]
    sm_scale = 1.0 / (192 ** 0.5)
    for seq_len in lens:
        for batch in batches:
            one = batch * seq_len * D_KV * 2
            if one > args.max_kv_gib * 2**30:
                continue
            n_rot = max(1, min(8, -(-ROTATE_BYTES // one)))
            kvs = [torch.randn((batch, seq_len, D_KV), dtype=torch.bfloat16, device=device) for _ in range(n_rot)]
            for heads in heads_list:
                for q in qs:
                    r = q * heads
                    q_lat = torch.randn((r, batch, D_LAT), dtype=torch.bfloat16, device=device)
                    q_pe = torch.randn((batch, r, D_PE), dtype=torch.bfloat16, device=device)
                    out = torch.empty((r, batch, D_LAT), dtype=torch.bfloat16, device=device)
                    for v in variants:
                        # At q = 1 the three layouts differ only in the tile height.
                        dec = Verify(batch, heads, q, seq_len, n_sm, device, v)
                        fns = [(lambda kv=kv: dec(q_lat, q_pe, kv, out, sm_scale)) for kv in kvs]
                        med, p10, p90, n = time_graph(fns, min_calls=8)
                        csv.row({"kernel": "TRITON_MLA_VERIFY", "variant": v, "num_heads": heads,
                                 "batch": batch, "q_len": q, "kv_len": seq_len, "num_splits": dec.splits,
                                 "kv_bytes": one, "median_us": med, "p10_us": p10, "p90_us": p90,
                                 "samples": n})
                        log(f"{v} h={heads} b={batch} q={q} len={seq_len} splits={dec.splits}: {med:.1f} us")
            del kvs
            torch.cuda.empty_cache()
    csv.close()


if __name__ == "__main__":
    main()
