"""Triton kernels shared by the micro-benchmarks and the reference decode step.

Each kernel stands in for one vLLM kernel of the Kimi-K2.5 / DeepSeek-V3 decode step
(see data/README.md for the mapping).  Kernel names are chosen so that they are easy to
recognise in a torch.profiler trace:

    rmsnorm_kernel                  vllm::rms_norm_kernel
    fused_add_rmsnorm_kernel        vllm::fused_add_rms_norm_kernel
    fused_q_kv_rmsnorm_kernel       q_a_layernorm + kv_a_layernorm (vLLM fused_q_kv_rmsnorm)
    rotary_embedding_kernel         vllm::rotary_embedding_kernel (q_pe and k_pe, GPT-J style)
    concat_and_cache_mla_kernel     vllm::concat_and_cache_mla_kernel
    mla_decode_stage1_splitkv_kernel  TRITON_MLA _fwd_grouped_kernel_stage1
    mla_decode_stage2_reduce_kernel   TRITON_MLA _fwd_kernel_stage2
    silu_and_mul_kernel             vllm::act_and_mul_kernel<silu>
    topk_sigmoid_kernel             vllm::moe::topkGating (sigmoid + bias, top-8, renormalise)
    moe_align_kernel                vllm::moe::moe_align_block_size_kernel (counts, offsets, permutation)
    moe_unpermute_sum_kernel        vllm::moe::moe_sum_kernel (+ adds the shared-expert output)
    vocab_parallel_embedding_kernel VocabParallelEmbedding lookup with out-of-shard masking
"""
import math

try:
    import torch
except ImportError:  # compile-only checks (harness/check_compile.py) run without torch
    torch = None
import triton
import triton.language as tl


def next_pow2(x):
    return 1 << max(0, (int(x) - 1).bit_length())


# ----------------------------------------------------------------------------- norms
@triton.jit
def rmsnorm_kernel(X, W, Y, N, eps, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_rmsnorm_kernel(X, R, W, N, eps, stride_x, stride_r, BLOCK: tl.constexpr):
    # r <- x + r ; x <- rmsnorm(r) * w   (both in place, like vllm::fused_add_rms_norm)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    tl.store(R + row * stride_r + offs, s.to(R.dtype.element_ty), mask=mask)
    var = tl.sum(s * s, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(X + row * stride_x + offs, (s * rstd * w).to(X.dtype.element_ty), mask=mask)


@triton.jit
def fused_q_kv_rmsnorm_kernel(QKV, WQ, WKV, QOUT, KVOUT, eps, stride_in, stride_q, stride_kv,
                              NQ: tl.constexpr, NKV: tl.constexpr,
                              BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr):
    # program (row, 0) normalises q_c = qkv[row, :NQ]; (row, 1) normalises kv_c = qkv[row, NQ:NQ+NKV]
    row = tl.program_id(0)
    seg = tl.program_id(1)
    if seg == 0:
        offs_q = tl.arange(0, BLOCK_Q)
        mask_q = offs_q < NQ
        xq = tl.load(QKV + row * stride_in + offs_q, mask=mask_q, other=0.0).to(tl.float32)
        rq = 1.0 / tl.sqrt(tl.sum(xq * xq, axis=0) / NQ + eps)
        wq = tl.load(WQ + offs_q, mask=mask_q, other=0.0).to(tl.float32)
        tl.store(QOUT + row * stride_q + offs_q, (xq * rq * wq).to(QOUT.dtype.element_ty), mask=mask_q)
    else:
        offs_k = tl.arange(0, BLOCK_KV)
        mask_k = offs_k < NKV
        xk = tl.load(QKV + row * stride_in + NQ + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        rk = 1.0 / tl.sqrt(tl.sum(xk * xk, axis=0) / NKV + eps)
        wk = tl.load(WKV + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        tl.store(KVOUT + row * stride_kv + offs_k, (xk * rk * wk).to(KVOUT.dtype.element_ty), mask=mask_k)


def rmsnorm(x, w, eps=1e-5, out=None):
    m, n = x.shape
    if out is None:
        out = torch.empty_like(x)
    rmsnorm_kernel[(m,)](x, w, out, n, eps, x.stride(0), out.stride(0),
                         BLOCK=next_pow2(n), num_warps=8 if n >= 4096 else 4)
    return out


def fused_add_rmsnorm(x, residual, w, eps=1e-5):
    m, n = x.shape
    fused_add_rmsnorm_kernel[(m,)](x, residual, w, n, eps, x.stride(0), residual.stride(0),
                                   BLOCK=next_pow2(n), num_warps=8 if n >= 4096 else 4)
    return x, residual


def fused_q_kv_rmsnorm(qkv, wq, wkv, q_out, kv_out, nq=1536, nkv=512, eps=1e-6):
    m = qkv.shape[0]
    fused_q_kv_rmsnorm_kernel[(m, 2)](qkv, wq, wkv, q_out, kv_out, eps, qkv.stride(0),
                                      q_out.stride(0), kv_out.stride(0), NQ=nq, NKV=nkv,
                                      BLOCK_Q=next_pow2(nq), BLOCK_KV=next_pow2(nkv), num_warps=4)
    return q_out, kv_out


# ----------------------------------------------------------------------------- activation
@triton.jit
def silu_and_mul_kernel(X, Y, N, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = col < N
    g = tl.load(X + row * stride_x + col, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(X + row * stride_x + N + col, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(Y + row * stride_y + col, y.to(Y.dtype.element_ty), mask=mask)


def silu_and_mul(x, out=None):
    m, n2 = x.shape
    n = n2 // 2
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    block = min(1024, next_pow2(n))
    silu_and_mul_kernel[(m, triton.cdiv(n, block))](x, out, n, x.stride(0), out.stride(0),
                                                   BLOCK=block, num_warps=4)
    return out


# ----------------------------------------------------------------------------- rope + kv write
@triton.jit
def rotary_embedding_kernel(QPE, KPE, QOUT, POS, COS_SIN, H,
                            s_qpe_b, s_qpe_h, s_kpe_b, s_qo_b, s_qo_h,
                            BLOCK_H: tl.constexpr, HALF: tl.constexpr):
    # GPT-J (interleaved) rotation of q_pe [B, H, 2*HALF] (written to QOUT) and k_pe [B, 2*HALF]
    # (in place).  COS_SIN is [max_pos, 2*HALF] fp32: cos in the first HALF, sin in the second.
    b = tl.program_id(0)
    pos = tl.load(POS + b)
    i = tl.arange(0, HALF)
    cos = tl.load(COS_SIN + pos * (2 * HALF) + i)
    sin = tl.load(COS_SIN + pos * (2 * HALF) + HALF + i)
    h = tl.arange(0, BLOCK_H)
    mh = h < H
    qb = QPE + b * s_qpe_b + h[:, None] * s_qpe_h
    x1 = tl.load(qb + 2 * i[None, :], mask=mh[:, None], other=0.0).to(tl.float32)
    x2 = tl.load(qb + 2 * i[None, :] + 1, mask=mh[:, None], other=0.0).to(tl.float32)
    ob = QOUT + b * s_qo_b + h[:, None] * s_qo_h
    tl.store(ob + 2 * i[None, :], (x1 * cos[None, :] - x2 * sin[None, :]).to(QOUT.dtype.element_ty),
             mask=mh[:, None])
    tl.store(ob + 2 * i[None, :] + 1, (x2 * cos[None, :] + x1 * sin[None, :]).to(QOUT.dtype.element_ty),
             mask=mh[:, None])
    kb = KPE + b * s_kpe_b
    k1 = tl.load(kb + 2 * i).to(tl.float32)
    k2 = tl.load(kb + 2 * i + 1).to(tl.float32)
    tl.store(kb + 2 * i, (k1 * cos - k2 * sin).to(KPE.dtype.element_ty))
    tl.store(kb + 2 * i + 1, (k2 * cos + k1 * sin).to(KPE.dtype.element_ty))


def rotary_embedding(q_pe, k_pe, q_out, pos, cos_sin):
    b, h, d = q_pe.shape
    rotary_embedding_kernel[(b,)](q_pe, k_pe, q_out, pos, cos_sin, h,
                                  q_pe.stride(0), q_pe.stride(1), k_pe.stride(0),
                                  q_out.stride(0), q_out.stride(1),
                                  BLOCK_H=max(2, next_pow2(h)), HALF=d // 2, num_warps=4)


def make_cos_sin(max_pos, rot_dim=64, theta=50000.0, device="cuda"):
    inv = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    t = torch.arange(max_pos, dtype=torch.float64)
    f = torch.outer(t, inv)
    return torch.cat([f.cos(), f.sin()], dim=1).float().to(device)


@triton.jit
def concat_and_cache_mla_kernel(KVC, KPE, CACHE, SLOT, s_kvc, s_kpe, s_cache_b, s_cache_t,
                                D_LAT: tl.constexpr, D_PE: tl.constexpr):
    # cache[b, slot[b], :D_LAT] = kv_c[b] ; cache[b, slot[b], D_LAT:] = k_pe[b]
    b = tl.program_id(0)
    slot = tl.load(SLOT + b)
    dst = CACHE + b.to(tl.int64) * s_cache_b + slot.to(tl.int64) * s_cache_t
    d = tl.arange(0, D_LAT)
    tl.store(dst + d, tl.load(KVC + b * s_kvc + d))
    p = tl.arange(0, D_PE)
    tl.store(dst + D_LAT + p, tl.load(KPE + b * s_kpe + p))


def concat_and_cache_mla(kv_c, k_pe, cache, slot):
    # cache: [B, T, 576] view (any batch/token strides, last dim contiguous)
    b = kv_c.shape[0]
    concat_and_cache_mla_kernel[(b,)](kv_c, k_pe, cache, slot, kv_c.stride(0), k_pe.stride(0),
                                      cache.stride(0), cache.stride(1), D_LAT=512, D_PE=64,
                                      num_warps=4)


# ----------------------------------------------------------------------------- MLA decode attention
@triton.jit
def mla_decode_stage1_splitkv_kernel(QN, QP, KV, MID_O, MID_LSE, sm_scale, seq_len, H,
                                     tokens_per_split,
                                     s_qn_h, s_qn_b, s_qp_b, s_qp_h, s_kv_b, s_kv_t,
                                     s_mo_b, s_mo_h, s_mo_s, s_ml_b, s_ml_h,
                                     BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                                     D_LAT: tl.constexpr, D_PE: tl.constexpr):
    # grid = (head blocks, kv splits, batch).  Scores use the 512-wide latent (absorbed q_nope)
    # plus the 64-wide rope part; the same latent tile is the value (MLA weight absorption).
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
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mn = offs_n < end
        ptr = kv_base + offs_n[:, None].to(tl.int64) * s_kv_t
        kv = tl.load(ptr + offs_d[None, :], mask=mn[:, None], other=0.0)
        kp = tl.load(ptr + D_LAT + offs_p[None, :], mask=mn[:, None], other=0.0)
        s = tl.dot(q, tl.trans(kv)) + tl.dot(qp, tl.trans(kp))
        s = tl.where(mn[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kv.dtype), kv)
        m_i = m_new
    ok = l_i > 0
    l_safe = tl.where(ok, l_i, 1.0)
    lse = tl.where(ok, m_i + tl.log2(l_safe), float("-inf"))
    o = acc / l_safe[:, None]
    tl.store(MID_O + b * s_mo_b + offs_h[:, None] * s_mo_h + sp * s_mo_s + offs_d[None, :], o, mask=mh[:, None])
    tl.store(MID_LSE + b * s_ml_b + offs_h * s_ml_h + sp, lse, mask=mh)


@triton.jit
def mla_decode_stage2_reduce_kernel(MID_O, MID_LSE, OUT, num_splits,
                                    s_mo_b, s_mo_h, s_mo_s, s_ml_b, s_ml_h, s_o_h, s_o_b,
                                    D_LAT: tl.constexpr):
    h = tl.program_id(0)
    b = tl.program_id(1)
    offs_d = tl.arange(0, D_LAT)
    m = float("-inf")
    for s in range(0, num_splits):
        m = tl.maximum(m, tl.load(MID_LSE + b * s_ml_b + h * s_ml_h + s))
    acc = tl.zeros([D_LAT], tl.float32)
    den = 0.0
    for s in range(0, num_splits):
        lse = tl.load(MID_LSE + b * s_ml_b + h * s_ml_h + s)
        w = tl.exp2(lse - m)
        o = tl.load(MID_O + b * s_mo_b + h * s_mo_h + s * s_mo_s + offs_d)
        acc += w * o
        den += w
    tl.store(OUT + h * s_o_h + b * s_o_b + offs_d, (acc / den).to(OUT.dtype.element_ty))


def mla_num_splits(batch, heads, ctx, n_sm=132, min_tokens=256, block_h=32):
    hblocks = triton.cdiv(heads, block_h)
    target = 4 * n_sm
    s = max(1, min(triton.cdiv(ctx, min_tokens), triton.cdiv(target, batch * hblocks)))
    return s


class MlaDecode:
    """Split-KV MLA decode over a latent cache [B, T, 576]; q_nope_lat [H, B, 512], q_pe [B, H, 64].

    Output layout [H, B, 512] (what the W_UV bmm consumes)."""

    def __init__(self, batch, heads, max_ctx, device, n_sm=132):
        self.block_h = min(32, max(16, next_pow2(heads)))
        self.max_splits = mla_num_splits(batch, heads, max_ctx, n_sm, block_h=self.block_h)
        self.n_sm = n_sm
        self.mid_o = torch.empty((batch, heads, self.max_splits, 512), dtype=torch.float32, device=device)
        self.mid_lse = torch.empty((batch, heads, self.max_splits), dtype=torch.float32, device=device)

    def __call__(self, q_lat, q_pe, kv, seq_len, out, sm_scale):
        h, b, _ = q_lat.shape
        splits = min(self.max_splits, mla_num_splits(b, h, seq_len, self.n_sm, block_h=self.block_h))
        tps = triton.cdiv(seq_len, splits)
        # BLOCK_N 32 / 8 warps: no register spills for BLOCK_H 16 or 32 (ptxas -v, sm_90a)
        block_n = 32
        nw = 8
        mo, ml = self.mid_o, self.mid_lse
        grid = (triton.cdiv(h, self.block_h), splits, b)
        mla_decode_stage1_splitkv_kernel[grid](
            q_lat, q_pe, kv, mo, ml, sm_scale, seq_len, h, tps,
            q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), kv.stride(0), kv.stride(1),
            mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            BLOCK_H=self.block_h, BLOCK_N=block_n, D_LAT=512, D_PE=64, num_warps=nw, num_stages=2)
        mla_decode_stage2_reduce_kernel[(h, b)](
            mo, ml, out, splits, mo.stride(0), mo.stride(1), mo.stride(2), ml.stride(0), ml.stride(1),
            out.stride(0), out.stride(1), D_LAT=512, num_warps=4)
        return out


def mla_decode_reference(q_lat, q_pe, kv, seq_len, sm_scale):
    # q_lat [H,B,512], q_pe [B,H,64], kv [B,T,576] -> [H,B,512] in fp32
    k = kv[:, :seq_len].float()
    q = torch.cat([q_lat.transpose(0, 1).float(), q_pe.float()], dim=-1)  # [B,H,576]
    s = torch.einsum("bhd,btd->bht", q, k) * sm_scale
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bht,btd->bhd", p, k[..., :512])
    return o.transpose(0, 1)


# ----------------------------------------------------------------------------- router / MoE
@triton.jit
def topk_sigmoid_kernel(LOGITS, BIAS, IDS, WTS, E, s_l, scale,
                        BLOCK_E: tl.constexpr, TOPK: tl.constexpr):
    # DeepSeek-V3 / Kimi noaux_tc routing with n_group = 1: select by sigmoid(logit) + bias,
    # weight by sigmoid(logit), renormalise, multiply by routed_scaling_factor.
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_E)
    me = offs < E
    x = tl.load(LOGITS + row * s_l + offs, mask=me, other=0.0).to(tl.float32)
    sc = 1.0 / (1.0 + tl.exp(-x))
    sel = tl.where(me, sc + tl.load(BIAS + offs, mask=me, other=0.0), float("-inf"))
    k = tl.arange(0, TOPK)
    ids = tl.zeros([TOPK], tl.int32)
    wts = tl.zeros([TOPK], tl.float32)
    for j in tl.static_range(TOPK):
        idx = tl.argmax(sel, axis=0)
        w = tl.sum(tl.where(offs == idx, sc, 0.0), axis=0)
        ids = tl.where(k == j, idx, ids)
        wts = tl.where(k == j, w, wts)
        sel = tl.where(offs == idx, float("-inf"), sel)
    wts = wts / tl.sum(wts, axis=0) * scale
    tl.store(IDS + row * TOPK + k, ids)
    tl.store(WTS + row * TOPK + k, wts)


def topk_sigmoid(logits, bias, ids, wts, scale=2.827, topk=8):
    m, e = logits.shape
    topk_sigmoid_kernel[(m,)](logits, bias, ids, wts, e, logits.stride(0), scale,
                              BLOCK_E=next_pow2(e), TOPK=topk, num_warps=4)


@triton.jit
def moe_align_kernel(IDS, OFFS, SRC_ROW, INV, n, TOPK: tl.constexpr, BLOCK: tl.constexpr):
    # One program per expert e: count assignments to e, place them (stable) after all assignments
    # to experts < e.  Writes OFFS[e] (end offset, as torch._grouped_mm wants), SRC_ROW[pos] =
    # token index feeding sorted row pos, and INV[flat] = pos.
    e = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    ids = tl.load(IDS + offs, mask=m, other=2147483647)
    before = tl.sum((ids < e).to(tl.int32), axis=0)
    hit = (ids == e) & m
    hit_i = hit.to(tl.int32)
    rank = tl.cumsum(hit_i, axis=0) - 1
    pos = before + rank
    tl.store(SRC_ROW + pos, offs // TOPK, mask=hit)
    tl.store(INV + offs, pos, mask=hit)
    tl.store(OFFS + e, before + tl.sum(hit_i, axis=0))


def moe_align(ids, n_experts, offs, src_row, inv, topk=8):
    n = ids.numel()
    moe_align_kernel[(n_experts,)](ids, offs, src_row, inv, n, TOPK=topk,
                                   BLOCK=max(16, next_pow2(n)), num_warps=4 if n <= 1024 else 8)


@triton.jit
def moe_unpermute_sum_kernel(Y, INV, WTS, SHARED, OUT, N, s_y, s_sh, s_o,
                             TOPK: tl.constexpr, HAS_SHARED: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mc = col < N
    if HAS_SHARED:
        acc = tl.load(SHARED + t * s_sh + col, mask=mc, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
    for j in tl.static_range(TOPK):
        r = tl.load(INV + t * TOPK + j)
        w = tl.load(WTS + t * TOPK + j)
        acc += w * tl.load(Y + r.to(tl.int64) * s_y + col, mask=mc, other=0.0).to(tl.float32)
    tl.store(OUT + t * s_o + col, acc.to(OUT.dtype.element_ty), mask=mc)


def moe_unpermute_sum(y, inv, wts, shared, out, topk=8):
    m, n = out.shape
    block = 1024
    moe_unpermute_sum_kernel[(m, triton.cdiv(n, block))](
        y, inv, wts, shared if shared is not None else out, out, n, y.stride(0),
        shared.stride(0) if shared is not None else 0, out.stride(0),
        TOPK=topk, HAS_SHARED=shared is not None, BLOCK=block, num_warps=4)
    return out


# ----------------------------------------------------------------------------- embedding
@triton.jit
def vocab_parallel_embedding_kernel(IDS, TABLE, OUT, start, n_local, N, s_t, s_o, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mc = col < N
    tok = tl.load(IDS + t)
    loc = tok - start
    inside = (loc >= 0) & (loc < n_local)
    loc = tl.where(inside, loc, 0)
    v = tl.load(TABLE + loc.to(tl.int64) * s_t + col, mask=mc & inside, other=0.0)
    tl.store(OUT + t * s_o + col, v, mask=mc)


def vocab_parallel_embedding(ids, table, out, start):
    m = ids.numel()
    n = table.shape[1]
    block = 1024
    vocab_parallel_embedding_kernel[(m, triton.cdiv(n, block))](
        ids, table, out, start, table.shape[0], n, table.stride(0), out.stride(0),
        BLOCK=block, num_warps=4)
    return out


# ----------------------------------------------------------------------------- self test
def self_test(device="cuda"):
    """Compare every kernel with a float reference on fresh random data; returns list of (name, rel_err)."""
    torch.manual_seed(1234)
    res = []

    def rel(a, b):
        a = a.float()
        b = b.float()
        return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()

    x = torch.randn(37, 7168, device=device, dtype=torch.bfloat16)
    w = torch.rand(7168, device=device, dtype=torch.bfloat16) + 0.5
    ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()
    res.append(("rmsnorm_kernel", rel(rmsnorm(x, w), ref)))
    r = torch.randn_like(x)
    s = x.float() + r.float()
    ref = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()
    xx, rr = x.clone(), r.clone()
    fused_add_rmsnorm(xx, rr, w)
    res.append(("fused_add_rmsnorm_kernel", max(rel(xx, ref), rel(rr, s))))
    qkv = torch.randn(5, 2112, device=device, dtype=torch.bfloat16)
    wq = torch.rand(1536, device=device, dtype=torch.bfloat16) + 0.5
    wk = torch.rand(512, device=device, dtype=torch.bfloat16) + 0.5
    qo = torch.empty(5, 1536, device=device, dtype=torch.bfloat16)
    ko = torch.empty(5, 512, device=device, dtype=torch.bfloat16)
    fused_q_kv_rmsnorm(qkv, wq, wk, qo, ko)
    qf, kf = qkv[:, :1536].float(), qkv[:, 1536:2048].float()
    rq = qf * torch.rsqrt(qf.pow(2).mean(-1, keepdim=True) + 1e-6) * wq.float()
    rk = kf * torch.rsqrt(kf.pow(2).mean(-1, keepdim=True) + 1e-6) * wk.float()
    res.append(("fused_q_kv_rmsnorm_kernel", max(rel(qo, rq), rel(ko, rk))))
    g = torch.randn(9, 2 * 2304, device=device, dtype=torch.bfloat16)
    ref = torch.nn.functional.silu(g[:, :2304].float()) * g[:, 2304:].float()
    res.append(("silu_and_mul_kernel", rel(silu_and_mul(g), ref)))
    # rope
    B, H = 6, 32
    q = torch.randn(B, H, 192, device=device, dtype=torch.bfloat16)
    kpe = torch.randn(B, 64, device=device, dtype=torch.bfloat16)
    cs = make_cos_sin(4096, device=device)
    pos = torch.randint(0, 4096, (B,), device=device, dtype=torch.int32)
    qout = torch.empty(B, H, 64, device=device, dtype=torch.bfloat16)
    kref_in = kpe.clone()
    rotary_embedding(q[:, :, 128:], kpe, qout, pos, cs)

    def rot(v, p):
        c = cs[p.long(), :32]
        sn = cs[p.long(), 32:]
        if v.dim() == 3:
            c, sn = c[:, None], sn[:, None]
        x1, x2 = v.float()[..., 0::2], v.float()[..., 1::2]
        o = torch.empty_like(v.float())
        o[..., 0::2] = x1 * c - x2 * sn
        o[..., 1::2] = x2 * c + x1 * sn
        return o
    res.append(("rotary_embedding_kernel", max(rel(qout, rot(q[:, :, 128:], pos)), rel(kpe, rot(kref_in, pos)))))
    # kv write
    cache = torch.randn(B, 100, 576, device=device, dtype=torch.bfloat16)
    kvc = torch.randn(B, 512, device=device, dtype=torch.bfloat16)
    slot = torch.randint(0, 100, (B,), device=device, dtype=torch.int64)
    concat_and_cache_mla(kvc, kpe, cache, slot)
    got = torch.stack([cache[i, slot[i]] for i in range(B)])
    res.append(("concat_and_cache_mla_kernel", rel(got, torch.cat([kvc, kpe], -1))))
    # attention, several head counts / lengths
    worst = 0.0
    for (B, H, T) in [(3, 32, 1000), (2, 8, 3000), (1, 64, 700), (5, 16, 33)]:
        kv = torch.randn(B, T + 5, 576, device=device, dtype=torch.bfloat16)
        ql = torch.randn(H, B, 512, device=device, dtype=torch.bfloat16)
        qp = torch.randn(B, H, 64, device=device, dtype=torch.bfloat16)
        att = MlaDecode(B, H, T, device)
        out = torch.full((H, B, 512), float("nan"), device=device, dtype=torch.bfloat16)
        sc = 1.0 / math.sqrt(576)
        att(ql, qp, kv, T, out, sc)
        worst = max(worst, rel(out, mla_decode_reference(ql, qp, kv, T, sc)))
    res.append(("mla_decode_stage1+2", worst))
    # router
    M = 33
    logits = torch.randn(M, 384, device=device, dtype=torch.bfloat16)
    bias = torch.randn(384, device=device, dtype=torch.float32) * 0.1
    ids = torch.empty(M, 8, device=device, dtype=torch.int32)
    wts = torch.empty(M, 8, device=device, dtype=torch.float32)
    topk_sigmoid(logits, bias, ids, wts)
    sc = torch.sigmoid(logits.float())
    ref_ids = torch.topk(sc + bias, 8, dim=-1).indices
    ref_w = torch.gather(sc, 1, ref_ids)
    ref_w = ref_w / ref_w.sum(-1, keepdim=True) * 2.827
    ok = torch.equal(torch.sort(ids.long(), -1).values, torch.sort(ref_ids, -1).values)
    res.append(("topk_sigmoid_kernel", rel(torch.sort(wts, -1).values, torch.sort(ref_w, -1).values) + (0 if ok else 1)))
    # align + unpermute
    n = M * 8
    offs = torch.empty(384, device=device, dtype=torch.int32)
    src = torch.full((n,), -1, device=device, dtype=torch.int32)
    inv = torch.full((n,), -1, device=device, dtype=torch.int32)
    moe_align(ids.view(-1), 384, offs, src, inv)
    flat = ids.view(-1).long()
    order = torch.argsort(flat, stable=True)
    ok = torch.equal(src.long(), order // 8) and torch.equal(offs.long(), torch.cumsum(torch.bincount(flat, minlength=384), 0))
    ok = ok and torch.equal(inv.long()[order], torch.arange(n, device=device))
    y = torch.randn(n, 7168, device=device, dtype=torch.bfloat16)
    sh = torch.randn(M, 7168, device=device, dtype=torch.bfloat16)
    out = torch.empty(M, 7168, device=device, dtype=torch.bfloat16)
    moe_unpermute_sum(y, inv, wts, sh, out)
    ref = sh.float() + (y.float()[inv.long()].view(M, 8, 7168) * wts[..., None]).sum(1)
    res.append(("moe_align_kernel+moe_unpermute_sum_kernel", rel(out, ref) + (0 if ok else 1)))
    # embedding
    table = torch.randn(1000, 7168, device=device, dtype=torch.bfloat16)
    tok = torch.randint(0, 3000, (17,), device=device, dtype=torch.int64)
    out = torch.empty(17, 7168, device=device, dtype=torch.bfloat16)
    vocab_parallel_embedding(tok, table, out, 1000)
    loc = tok - 1000
    inside = (loc >= 0) & (loc < 1000)
    ref = torch.where(inside[:, None], table[loc.clamp(0, 999)], torch.zeros_like(table[:1]))
    res.append(("vocab_parallel_embedding_kernel", rel(out, ref) if ref.norm() > 0 else (out.float().abs().max().item())))
    return res
