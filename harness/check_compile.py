#!/usr/bin/env python3
"""Compile every harness Triton kernel for sm_90 without a GPU (catches front-end errors early).

Usage: PYTHONPATH=<dir with triton> python3 harness/check_compile.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import kernels as K  # noqa: E402

T = GPUTarget("cuda", 90, 32)
bf, f32, i32, i64 = "*bf16", "*fp32", "*i32", "*i64"


def comp(fn, sig, const, **opts):
    full = dict(sig)
    for k, v in const.items():
        full[k] = "constexpr"
    src = ASTSource(fn, full, constexprs={(list(full).index(k),): v for k, v in const.items()})
    try:
        k = triton.compile(src, target=T, options=opts)
        md = k.metadata
        print(f"OK   {fn.__name__:40s} {const} regs? shared={md.shared}")
        return True
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {fn.__name__:40s} {const}: {str(e)[-1500:]}")
        return False


def names(fn):
    return fn.arg_names


def sigd(fn, types):
    return dict(zip(names(fn), types))


ok = True
ok &= comp(K.rmsnorm_kernel, sigd(K.rmsnorm_kernel, [bf, bf, bf, "i32", "fp32", "i32", "i32"]), {"BLOCK": 8192}, num_warps=8)
ok &= comp(K.fused_add_rmsnorm_kernel, sigd(K.fused_add_rmsnorm_kernel, [bf, bf, bf, "i32", "fp32", "i32", "i32"]), {"BLOCK": 8192}, num_warps=8)
ok &= comp(K.fused_q_kv_rmsnorm_kernel, sigd(K.fused_q_kv_rmsnorm_kernel, [bf, bf, bf, bf, bf, "fp32", "i32", "i32", "i32"]),
           {"NQ": 1536, "NKV": 512, "BLOCK_Q": 2048, "BLOCK_KV": 512}, num_warps=4)
ok &= comp(K.silu_and_mul_kernel, sigd(K.silu_and_mul_kernel, [bf, bf, "i32", "i32", "i32"]), {"BLOCK": 1024}, num_warps=4)
ok &= comp(K.rotary_embedding_kernel, sigd(K.rotary_embedding_kernel, [bf, bf, bf, i32, f32, "i32", "i32", "i32", "i32", "i32", "i32"]),
           {"BLOCK_H": 32, "HALF": 32}, num_warps=4)
ok &= comp(K.concat_and_cache_mla_kernel, sigd(K.concat_and_cache_mla_kernel, [bf, bf, bf, i64, "i32", "i32", "i64", "i32"]),
           {"D_LAT": 512, "D_PE": 64}, num_warps=4)
st1 = [bf, bf, bf, f32, f32, "fp32", "i32", "i32", "i32"] + ["i32"] * 11
for bh, bn, nw in [(32, 32, 8), (16, 64, 4)]:
    ok &= comp(K.mla_decode_stage1_splitkv_kernel, sigd(K.mla_decode_stage1_splitkv_kernel, st1),
               {"BLOCK_H": bh, "BLOCK_N": bn, "D_LAT": 512, "D_PE": 64}, num_warps=nw, num_stages=2)
ok &= comp(K.mla_decode_stage2_reduce_kernel, sigd(K.mla_decode_stage2_reduce_kernel, [f32, f32, bf, "i32"] + ["i32"] * 7),
           {"D_LAT": 512}, num_warps=4)
ok &= comp(K.topk_sigmoid_kernel, sigd(K.topk_sigmoid_kernel, ["*bf16", f32, i32, f32, "i32", "i32", "fp32"]),
           {"BLOCK_E": 512, "TOPK": 8}, num_warps=4)
ok &= comp(K.moe_align_kernel, sigd(K.moe_align_kernel, [i32, i32, i32, i32, "i32"]), {"TOPK": 8, "BLOCK": 4096}, num_warps=8)
ok &= comp(K.moe_unpermute_sum_kernel, sigd(K.moe_unpermute_sum_kernel, [bf, i32, f32, bf, bf, "i32", "i32", "i32", "i32"]),
           {"TOPK": 8, "HAS_SHARED": True, "BLOCK": 1024}, num_warps=4)
ok &= comp(K.moe_unpermute_sum_kernel, sigd(K.moe_unpermute_sum_kernel, [bf, i32, f32, bf, bf, "i32", "i32", "i32", "i32"]),
           {"TOPK": 8, "HAS_SHARED": False, "BLOCK": 1024}, num_warps=4)
ok &= comp(K.vocab_parallel_embedding_kernel, sigd(K.vocab_parallel_embedding_kernel, [i64, bf, bf, "i32", "i32", "i32", "i32", "i32"]),
           {"BLOCK": 1024}, num_warps=4)
print("ALL OK" if ok else "SOME FAILED")
