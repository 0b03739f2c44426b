#!/usr/bin/env python3
"""Per-op (inner) breakdown of AIConfigurator's static_gen estimate for Kimi-K2.5 on rtx_pro_6000_server.

Run with the aiconfigurator==0.12.0 venv: python harness/aiconfigurator_estimate_ops.py 1,8,32,64,128
Rebuilds the model the way aiconfigurator.cli.api's static estimate does (TP 8, moe_tp 8, moe_ep 1,
vllm 0.24.0, default quant modes from the checkpoint config) and evaluates every op of model.generation_ops,
descending into FallbackOp (primary, else fallback) and OverlapOp (group_a / group_b), one decode step at
KV length isl+1, x = batch tokens. Latencies are per decode step, summed over layers (op scale_factor).
"""
import sys
from aiconfigurator.cli import api
from aiconfigurator.sdk.inference_session import InferenceSession  # noqa: F401
from aiconfigurator.sdk.models import get_model
from aiconfigurator.sdk.backends.factory import get_backend
from aiconfigurator.sdk.perf_database import get_database_view
from aiconfigurator_core.sdk.engine import _evaluate_single_op

MODEL, SYSTEM, BACKEND, TP, ISL = "moonshotai/Kimi-K2.5", "rtx_pro_6000_server", "vllm", 8, 4096

def build():
    moe_tp, moe_ep = api._resolve_moe_parallelism(TP, 1, 8, 1, model_path=MODEL)
    mc = api._build_model_config(TP, 1, 1, moe_tp, moe_ep, None, None, None, None, None,
                                 forward_model="op_level", enable_encoder_dp=True, attention_backend=None)
    db = get_database_view(SYSTEM, BACKEND, "0.24.0", allow_missing_data=False, database_mode="SILICON", transfer_policy=None)
    if api.check_is_moe(MODEL):
        api.resolve_model_config_moe_comm(mc, model_path=MODEL, backend_name=BACKEND, database=db,
                                          required_phases=("context", "generation"),
                                          fmha_quant_mode_explicit=False, kvcache_quant_mode_explicit=False)
    if mc.moe_comm_backend is None:
        api.resolve_context_fmha_by_data(mc, MODEL, db, BACKEND, is_context_role=False)
    api.resolve_dsv4_moe_arch(mc, MODEL, system_name=SYSTEM, backend_name=BACKEND)
    api.resolve_nvfp4_for_system(mc, SYSTEM, MODEL, backend_name=BACKEND)
    return get_model(MODEL, mc, BACKEND), db

def ev(op, db, b, depth=0, out=None):
    name = getattr(op, "_name", None) or getattr(op, "name", "?")
    try:
        r = _evaluate_single_op(db, op, is_context=False, batch_size=b, s=ISL + 1, prefix=0, x=None,
                                imbalance_correction_scale=1.0)
        lat = float(getattr(r, "latency", r) if not isinstance(r, (int, float)) else r)
        txt = f"{lat:10.3f} ms"
    except Exception as e:  # noqa: BLE001
        txt = f"   (error: {type(e).__name__}: {str(e)[:120]})"
    out.append(f"{'  ' * depth}{name:<40s}{txt}   [{type(op).__name__}]")
    for attr in ("primary", "_primary", "group_a", "_group_a", "group_b", "_group_b", "fallback", "_fallback"):
        sub = getattr(op, attr, None)
        if sub is None:
            continue
        subs = sub if isinstance(sub, (list, tuple)) else [sub]
        out.append(f"{'  ' * (depth + 1)}<{attr.strip('_')}>")
        for s in subs:
            ev(s, db, b, depth + 2, out)

if __name__ == "__main__":
    model, db = build()
    for b in [int(x) for x in sys.argv[1].split(",")]:
        out = [f"--- batch {b}, KV length {ISL + 1}: inner ops of model.generation_ops (per step, all layers)"]
        for op in model.generation_ops:
            ev(op, db, b, 0, out)
        print("\n".join(out))
