#!/usr/bin/env python3
"""Convert NVIDIA AIConfigurator's measured performance tables (Parquet) into small decodesim CSVs.

Source: the PyPI wheel `aiconfigurator-core` (Apache-2.0, https://github.com/ai-dynamo/aiconfigurator),
which ships per-system measurement tables under `aiconfigurator_core/systems/data/<system>/`:

  <family>/<backend>/<backend_version>/<table>.parquet   + collection_meta.yaml beside it
  comm/nccl/<nccl_version>/nccl_perf.parquet

Only the shapes of the bundled models are kept (Kimi-K2.5 for every table; the MoE table also the other
bundled MoE models' routed experts), so that the Rust side can read plain CSV (no Parquet) and the
committed files stay small. Written into --out:

  moe.csv             distribution,quant,experts,hidden,inter,topk,moe_tp,moe_ep,num_tokens,latency_us
                      the fused MoE layer (vLLM FusedMoE) at the routed-expert shape and weight format of
                      each bundled MoE model (MOE_SHAPES: Kimi-K2.5 int4_wo, DeepSeek-V3 and MiniMax-M2.5
                      fp8_block, Qwen3-235B bfloat16), where the source has them; every moe_tp/moe_ep/
                      num_tokens and the three token->expert distributions of the source.
  mla_generation.csv  kernel,kv_dtype,gemm_dtype,num_heads,tp,batch,isl,step,latency_us
                      vLLM MLA decode module (TRITON_MLA) measured on DeepSeek-V3 weights at tp_size 1 with
                      num_heads = heads per rank; Kimi-K2.5 has the same MLA dimensions (hidden 7168, q_lora
                      1536, kv_lora 512, nope 128, rope 64, v 128) and 64 heads, so num_heads = 64/tp is
                      Kimi's per-rank shape at TP = tp (tp = 1, 2, 4, 8). `step` = the KV length the decode
                      step attends over (the source's `step`; the source's `isl` is 1 in every row).
  gemm.csv            dtype,m,n,k,latency_us
                      torch.nn.functional.linear (bf16) at the (n, k) grid points nearest to Kimi-K2.5's dense
                      GEMM shapes at TP 1, 2, 4, 8 (see gemm_shapes.csv), every m of the source.
  gemm_shapes.csv     name,tp,n,k,n_lo,n_hi,k_lo,k_hi,exact
                      which grid points bracket each Kimi shape (n_lo == n_hi when n is on the grid).
  nccl_collectives.csv  op,impl,mode,dtype,nranks,elements,bytes,latency_us   (impl = nccl)
  custom_allreduce.csv  op,impl,mode,dtype,nranks,elements,bytes,latency_us   (impl = vllm_custom,
                      mode = graph | eager: vLLM's custom all-reduce inside / outside a CUDA graph)
  deepep_ll.csv       phase,hidden,topk,experts,ranks,num_tokens,bytes,latency_us
                      DeepEP's low-latency dispatch and combine kernels (SGLang's wide-EP collector, table
                      comm/sglang/<version>/wideep_deepep_ll_perf.parquet): every row, one per phase;
                      num_tokens per rank, ranks = node_num x the system's GPUs per node, bytes = the rank's
                      payload as the source's bandwidth column counts it (num_tokens x topk x message: FP8
                      hidden + hidden/128 float32 scales + a 16-byte header for dispatch, BF16 hidden for
                      combine); latency_us = the source's avg_t_us.
  MANIFEST.txt, NOTICE, LICENSE (the Apache-2.0 text)

Units: the source latencies are milliseconds; every latency_us here = source * 1000. The collective
tables' `message_size` is a count of ELEMENTS (AIConfigurator's NCCL/CustomAllReduce ops are built from
`num_elements_per_token * num_tokens`); bytes = elements * dtype size (half/bfloat16 = 2, int8 = 1).
Why not decodesim's collectives.csv schema: it has no column for the implementation (NCCL vs vLLM custom
all-reduce), no reduce_scatter/alltoall, and the source does not say how the NCCL numbers were timed
(graph or eager), which that schema's `mode` requires.

Usage (the wheel is ~81 MB; nothing but pyarrow is needed, see requirements-aiconfigurator.txt):
  pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
  unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl -d /tmp/aic/wheel
  python3 harness/aiconfigurator_tables.py --wheel-dir /tmp/aic/wheel --system rtx_pro_6000_server \
      --backend vllm --license-file LICENSE_FROM_aiconfigurator-0.12.0 \
      --out data/calibration/aiconfigurator/rtx_pro_6000_server/
(`--data-dir DIR` instead of --wheel-dir points straight at `.../aiconfigurator_core/systems/data`.)
The aiconfigurator-core wheel carries no LICENSE file (its METADATA says `License-Expression: Apache-2.0`);
pass the LICENSE of the same project's `aiconfigurator==0.12.0` wheel (dist-info/licenses/LICENSE) with
--license-file, or the converter looks for one under --wheel-dir.
"""
import argparse
import glob
import hashlib
import math
import os
import shlex
import sys

import pyarrow.parquet as pq

# Kimi-K2.5 (models/kimi-k2.5.json): the shapes this converter keeps.
KIMI = dict(hidden=7168, experts=384, moe_inter=2048, topk=8, heads=64, q_lora=1536, kv_lora=512,
            dense_inter=18432, vocab=163840, moe_quant="int4_wo")
TPS = (1, 2, 4, 8)
MOE_KERNEL = {"int4_wo": "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"}
# The routed experts of every bundled MoE model (models/<name>.json: quantization_config or
# torch_dtype; n_routed_experts / num_experts / num_local_experts; hidden_size; moe_intermediate_size
# or intermediate_size; num_experts_per_tok): (moe_dtype as the source spells it, experts, hidden,
# inter, topk). The MoE table keeps the rows of these shapes only.
MOE_SHAPES = {
    "kimi-k2.5": ("int4_wo", 384, 7168, 2048, 8),          # compressed-tensors pack-quantized W4A16
    "deepseek-v3": ("fp8_block", 256, 7168, 2048, 8),      # fp8, weight_block_size [128, 128]
    "minimax-m2.5": ("fp8_block", 256, 3072, 1536, 8),     # fp8, weight_block_size [128, 128]
    "qwen3-235b-a22b": ("bfloat16", 128, 4096, 1536, 8),   # torch_dtype bfloat16
}
DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "fp8": 1, "float": 4, "float32": 4}


def kimi_gemm_shapes():
    """(name, tp, n, k) of Kimi-K2.5's dense bf16 GEMMs per rank (data/README.md "Shapes covered")."""
    h = KIMI["hidden"]
    out = []
    for tp in TPS:
        out += [
            ("fused_qkv_a", tp, 2112, h),                       # replicated
            ("q_b", tp, KIMI["heads"] * 192 // tp, KIMI["q_lora"]),
            ("kv_b", tp, KIMI["heads"] * 256 // tp, KIMI["kv_lora"]),
            ("o_proj", tp, h, KIMI["heads"] * 128 // tp),
            ("router", tp, KIMI["experts"], h),                 # replicated
            ("shared_gate_up", tp, 2 * KIMI["moe_inter"] // tp, h),
            ("shared_down", tp, h, KIMI["moe_inter"] // tp),
            ("dense_gate_up", tp, 2 * KIMI["dense_inter"] // tp, h),
            ("dense_down", tp, h, KIMI["dense_inter"] // tp),
            ("lm_head", tp, KIMI["vocab"] // tp, h),
        ]
    return out


def bracket(v, grid):
    """The grid values at or just below and at or just above v (equal when v is on the grid; one side
    only when v is outside the grid)."""
    lo = max((g for g in grid if g <= v), default=None)
    hi = min((g for g in grid if g >= v), default=None)
    if lo is None:
        lo = hi
    if hi is None:
        hi = lo
    return lo, hi


def us(ms):
    """ms -> us, 3 decimals (ns), trailing zeros kept for a fixed format."""
    return f"{ms * 1000.0:.3f}"


def read(path):
    t = pq.read_table(path)
    return t.column_names, t.to_pylist()


def write_csv(path, cols, rows):
    with open(path, "w", newline="\n") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return len(rows)


def distinct(rows, key):
    vals = {r[key] for r in rows}
    return sorted(vals) if all(isinstance(v, (int, float)) for v in vals) else sorted(vals, key=str)


class Converter:
    def __init__(self, data_dir, system, backend, version, nccl_version, out):
        self.data_dir = data_dir
        self.sysdir = os.path.join(data_dir, system)
        if not os.path.isdir(self.sysdir):
            raise SystemExit(f"no system folder {self.sysdir} (have: {', '.join(sorted(os.listdir(data_dir)))})")
        self.system, self.backend, self.version, self.nccl_version = system, backend, version, nccl_version
        self.out = out
        self.notes = []      # (output file, source path, rows in source, rows out, details)
        self.metas = {}      # source folder -> collection_meta.yaml text

    def src(self, family, fname, backend=None, version=None):
        d = os.path.join(self.sysdir, family, backend or self.backend, version or self.version)
        p = os.path.join(d, fname)
        if not os.path.exists(p):
            raise SystemExit(f"missing {p}")
        meta = os.path.join(d, "collection_meta.yaml")
        if os.path.exists(meta):
            with open(meta) as f:
                self.metas[os.path.relpath(d, self.data_dir)] = f.read()
        return p

    def rel(self, p):
        return "aiconfigurator_core/systems/data/" + os.path.relpath(p, self.data_dir)

    # ---------------------------------------------------------------- MoE
    def moe(self):
        p = self.src("moe", "moe_perf.parquet")
        cols, rows = read(p)
        key = lambda r: (r["moe_dtype"], r["num_experts"], r["hidden_size"], r["inter_size"], r["topk"],
                         r["distribution"], r["moe_tp_size"], r["moe_ep_size"], r["num_tokens"])
        sel, details = [], []
        for name, (q, experts, hidden, inter, topk) in MOE_SHAPES.items():
            part = [r for r in rows if r["moe_dtype"] == q and r["num_experts"] == experts
                    and r["hidden_size"] == hidden and r["inter_size"] == inter and r["topk"] == topk]
            if not part:
                details.append(f"{name} ({q}, {experts} experts, hidden {hidden}, inter {inter}, "
                               f"top-{topk}): no rows in the source")
                continue
            if name == "kimi-k2.5" and distinct(part, "kernel_source") != [MOE_KERNEL[q]]:
                raise SystemExit(f"{p}: expected kernel {MOE_KERNEL[q]} for the Kimi shape, "
                                 f"found {distinct(part, 'kernel_source')}")
            # Which kernel vLLM ran at each (moe_tp, moe_ep): one per setting, or the rows would
            # mix two implementations of the same call.
            by_setting = {}
            for r in part:
                by_setting.setdefault((r["moe_tp_size"], r["moe_ep_size"]), set()).add(r["kernel_source"])
            mixed = [k for k, v in by_setting.items() if len(v) > 1]
            if mixed:
                raise SystemExit(f"{p}: two kernels at (moe_tp, moe_ep) {mixed} for {name}")
            kernels = {}
            for (tp, ep), v in sorted(by_setting.items()):
                kernels.setdefault(next(iter(v)), []).append(f"{tp}x{ep}")
            sel += part
            details += [
                f"{name} (models/{name}.json): moe_dtype={q}, num_experts={experts}, hidden_size={hidden}, "
                f"inter_size={inter}, topk={topk}: {len(part)} rows; device '{part[0]['device']}', "
                f"framework {part[0]['framework']} {part[0]['version']}",
                *(f"  kernel_source {k} at (moe_tp x moe_ep) {' '.join(v)}" for k, v in kernels.items()),
                f"  num_tokens: {' '.join(str(x) for x in distinct(part, 'num_tokens'))}",
                f"  distributions: {', '.join(distinct(part, 'distribution'))}",
            ]
        if len({key(r) for r in sel}) != len(sel):
            raise SystemExit(f"{p}: duplicate keys in the kept subset")
        sel.sort(key=key)
        out = [(r["distribution"], r["moe_dtype"], r["num_experts"], r["hidden_size"], r["inter_size"],
                r["topk"], r["moe_tp_size"], r["moe_ep_size"], r["num_tokens"], us(r["latency"])) for r in sel]
        n = write_csv(os.path.join(self.out, "moe.csv"),
                      ["distribution", "quant", "experts", "hidden", "inter", "topk", "moe_tp", "moe_ep",
                       "num_tokens", "latency_us"], out)
        self.notes.append(("moe.csv", self.rel(p), len(rows), n, [
            f"source columns: {', '.join(cols)}; latency in ms",
            "filter: the routed-expert shape and weight format of each bundled MoE model:",
            *details,
            "inter = the full expert intermediate size, not the per-rank shard: moe_tp splits it",
        ]))

    # ---------------------------------------------------------------- MLA
    def mla(self, gemm_dtype="bfloat16"):
        p = self.src("mla", "mla_generation_module_perf.parquet")
        cols, rows = read(p)
        heads = {KIMI["heads"] // tp: tp for tp in TPS}
        sel = [r for r in rows if r["num_heads"] in heads and r["gemm_type"] == gemm_dtype]
        if distinct(sel, "isl") != [1] or distinct(sel, "tp_size") != [1]:
            raise SystemExit(f"{p}: expected isl = 1 and tp_size = 1 in every row")
        key = lambda r: (r["kv_cache_dtype"], r["num_heads"], r["batch_size"], r["step"])
        if len({key(r) for r in sel}) != len(sel):
            raise SystemExit(f"{p}: duplicate keys in the kept subset")
        sel.sort(key=lambda r: (r["kv_cache_dtype"], heads[r["num_heads"]], r["batch_size"], r["step"]))
        out = [(r["kernel_source"], r["kv_cache_dtype"], r["gemm_type"], r["num_heads"], heads[r["num_heads"]], r["batch_size"],
                r["isl"], r["step"], us(r["latency"])) for r in sel]
        n = write_csv(os.path.join(self.out, "mla_generation.csv"),
                      ["kernel", "kv_dtype", "gemm_dtype", "num_heads", "tp", "batch", "isl", "step", "latency_us"],
                      out)
        per_kv = {kv: sum(1 for r in rows if r["kv_cache_dtype"] == kv) for kv in distinct(rows, "kv_cache_dtype")}
        kv_heads = {kv: sorted({r["num_heads"] for r in rows if r["kv_cache_dtype"] == kv})
                    for kv in per_kv}
        self.notes.append(("mla_generation.csv", self.rel(p), len(rows), n, [
            f"source columns: {', '.join(cols)}; latency in ms",
            f"source: kernel_source {distinct(rows, 'kernel_source')}, model {distinct(rows, 'model')}, "
            f"mla_dtype {distinct(rows, 'mla_dtype')}, gemm_type {distinct(rows, 'gemm_type')}, "
            f"num_heads {distinct(rows, 'num_heads')}, batch_size {distinct(rows, 'batch_size')}, "
            f"isl {distinct(rows, 'isl')}, tp_size {distinct(rows, 'tp_size')}, step {distinct(rows, 'step')}",
            f"source rows per kv_cache_dtype: {per_kv}; num_heads per kv_cache_dtype: {kv_heads}",
            "kernel per kv_dtype in the kept rows: " + ", ".join(
                f"{kv}: {distinct([r for r in sel if r['kv_cache_dtype'] == kv], 'kernel_source')}"
                for kv in distinct(sel, "kv_cache_dtype")),
            f"filter: gemm_type={gemm_dtype} (Kimi-K2.5's attention weights are BF16), num_heads in "
            f"{sorted(heads)} = 64/tp for tp {TPS}; column tp = 64/num_heads (Kimi's TP for that per-rank shape)",
            "step = KV length of the decode step; batch x step combinations missing in the source "
            "(large batch x long KV) are missing here too",
            "the module spans what AIConfigurator's granular fallback (sdk/models/deepseek.py) splits into "
            "fused_qkv_a GEMM + q_b GEMM + attention (incl. W_UK/W_UV absorption) + o_proj GEMM",
        ]))

    # ---------------------------------------------------------------- GEMM
    def gemm(self, dtype="bfloat16"):
        p = self.src("gemm", "gemm_perf.parquet")
        cols, rows = read(p)
        rows_d = [r for r in rows if r["gemm_dtype"] == dtype]
        ngrid = sorted({r["n"] for r in rows_d})
        kgrid = sorted({r["k"] for r in rows_d})
        shapes, keep = [], set()
        for name, tp, n, k in kimi_gemm_shapes():
            nlo, nhi = bracket(n, ngrid)
            klo, khi = bracket(k, kgrid)
            exact = nlo == nhi == n and klo == khi == k
            shapes.append((name, tp, n, k, nlo, nhi, klo, khi, "yes" if exact else "no"))
            keep |= {(a, b) for a in (nlo, nhi) for b in (klo, khi)}
        sel = [r for r in rows_d if (r["n"], r["k"]) in keep]
        if len({(r["m"], r["n"], r["k"]) for r in sel}) != len(sel):
            raise SystemExit(f"{p}: duplicate (m, n, k) for {dtype}")
        sel.sort(key=lambda r: (r["n"], r["k"], r["m"]))
        out = [(dtype, r["m"], r["n"], r["k"], us(r["latency"])) for r in sel]
        n_out = write_csv(os.path.join(self.out, "gemm.csv"), ["dtype", "m", "n", "k", "latency_us"], out)
        write_csv(os.path.join(self.out, "gemm_shapes.csv"),
                  ["name", "tp", "n", "k", "n_lo", "n_hi", "k_lo", "k_hi", "exact"], shapes)
        inexact = sorted({f"{s[0]} tp{s[1]} ({s[2]},{s[3]}) -> n {s[4]}..{s[5]}, k {s[6]}..{s[7]}"
                          for s in shapes if s[8] == "no"})
        self.notes.append(("gemm.csv (+ gemm_shapes.csv)", self.rel(p), len(rows), n_out, [
            f"source columns: {', '.join(cols)}; latency in ms",
            f"source: gemm_dtype {distinct(rows, 'gemm_dtype')}, kernel_source {distinct(rows, 'kernel_source')}",
            f"{dtype} grid: n {ngrid}; k {kgrid}; m {distinct(rows_d, 'm')}",
            f"filter: gemm_dtype={dtype} (kernel {distinct(sel, 'kernel_source')}), the {len(keep)} (n,k) grid "
            f"points bracketing Kimi-K2.5's {len(shapes)} per-rank shapes (10 GEMMs x TP {TPS}), every m",
            f"shapes not on the grid ({len(inexact)}; interpolate or extrapolate between the bracketing points):",
        ] + ["  " + s for s in inexact]))

    # ---------------------------------------------------------------- collectives
    def collectives(self):
        cols_out = ["op", "impl", "mode", "dtype", "nranks", "elements", "bytes", "latency_us"]
        p = os.path.join(self.sysdir, "comm", "nccl", self.nccl_version, "nccl_perf.parquet")
        if not os.path.exists(p):
            raise SystemExit(f"missing {p}")
        meta = os.path.join(os.path.dirname(p), "collection_meta.yaml")
        if os.path.exists(meta):
            with open(meta) as f:
                self.metas[os.path.relpath(os.path.dirname(p), self.data_dir)] = f.read()
        cols, rows = read(p)
        self.nccl_rows = rows
        for d in distinct(rows, "nccl_dtype"):
            if d not in DTYPE_BYTES:
                raise SystemExit(f"{p}: unknown nccl_dtype {d}")
        rows.sort(key=lambda r: (r["op_name"], r["nccl_dtype"], r["num_gpus"], r["message_size"]))
        out = [(r["op_name"], "nccl", "unspecified", r["nccl_dtype"], r["num_gpus"], r["message_size"],
                r["message_size"] * DTYPE_BYTES[r["nccl_dtype"]], us(r["latency"])) for r in rows]
        n = write_csv(os.path.join(self.out, "nccl_collectives.csv"), cols_out, out)
        self.notes.append(("nccl_collectives.csv", self.rel(p), len(rows), n, [
            f"source columns: {', '.join(cols)}; latency in ms; message_size in elements of nccl_dtype",
            f"source: framework {distinct(rows, 'framework')} version {distinct(rows, 'version')} (= NCCL "
            f"version), kernel_source {distinct(rows, 'kernel_source')}, op_name {distinct(rows, 'op_name')}, "
            f"nccl_dtype {distinct(rows, 'nccl_dtype')}, num_gpus {distinct(rows, 'num_gpus')}, "
            f"message_size {min(r['message_size'] for r in rows)}..{max(r['message_size'] for r in rows)}",
            "all rows kept; bytes = elements x 2 (half) or x 1 (int8); mode = 'unspecified': the wheel does "
            "not say whether NCCL was timed inside a CUDA graph or launched eagerly (the ~6 us floor at 2 "
            "GPUs excludes a Python/ProcessGroup launch cost)",
            "for all_gather/reduce_scatter/alltoall the wheel does not say whether message_size is the "
            "per-rank or the total buffer (AIConfigurator passes num_elements_per_token x tokens)",
        ]))

        p = self.src("comm", "custom_allreduce_perf.parquet")
        cols, rows = read(p)
        for d in distinct(rows, "allreduce_dtype"):
            if d not in DTYPE_BYTES:
                raise SystemExit(f"{p}: unknown allreduce_dtype {d}")
        mode = {"vllm_graph": "graph", "vllm_eager": "eager"}
        for b in distinct(rows, "backend"):
            if b not in mode:
                raise SystemExit(f"{p}: unknown backend {b}")
        rows.sort(key=lambda r: (mode[r["backend"]], r["num_gpus"], r["message_size"]))
        out = [(r["op_name"], "vllm_custom", mode[r["backend"]], r["allreduce_dtype"], r["num_gpus"],
                r["message_size"], r["message_size"] * DTYPE_BYTES[r["allreduce_dtype"]], us(r["latency"]))
               for r in rows]
        n = write_csv(os.path.join(self.out, "custom_allreduce.csv"), cols_out, out)
        nccl_ar = {(r["num_gpus"], r["message_size"]): r["latency"] for r in self.nccl_rows
                   if r["op_name"] == "all_reduce" and r["nccl_dtype"] in ("half", "bfloat16", "float16")}
        ratios = []
        for g in distinct(rows, "num_gpus"):
            rs = sorted(r["latency"] / nccl_ar[(g, r["message_size"])] for r in rows
                        if r["backend"] == "vllm_graph" and r["num_gpus"] == g and (g, r["message_size"]) in nccl_ar)
            if rs:
                ratios.append(f"{g} GPUs: median {rs[len(rs) // 2]:.2f} (min {rs[0]:.2f}, max {rs[-1]:.2f}, "
                              f"{len(rs)} sizes)")
        self.notes.append(("custom_allreduce.csv", self.rel(p), len(rows), n, [
            f"source columns: {', '.join(cols)}; latency in ms; message_size in elements of allreduce_dtype",
            f"source: kernel_source {distinct(rows, 'kernel_source')}, backend {distinct(rows, 'backend')}, "
            f"allreduce_dtype {distinct(rows, 'allreduce_dtype')}, num_gpus {distinct(rows, 'num_gpus')}, "
            f"message_size {min(r['message_size'] for r in rows)}..{max(r['message_size'] for r in rows)}",
            "all rows kept; mode graph = kernel_source vLLM_custom_graph (inside a CUDA graph), eager = "
            "vLLM_custom_eager; bytes = elements x 2 (bfloat16)",
            "vLLM only runs its custom all-reduce kernel where it can (NVLink, or at most 2 PCIe GPUs, and "
            "below a size limit) and otherwise falls back to NCCL; where the graph numbers equal NCCL "
            "all_reduce at the same size, the fallback is what was timed",
            "graph latency / NCCL all_reduce (half) latency at equal element counts: " + "; ".join(ratios),
        ]))


    # ---------------------------------------------------------------- DeepEP low-latency
    def deepep_ll(self, backend="sglang", version="0.5.12"):
        p = self.src("comm", "wideep_deepep_ll_perf.parquet", backend=backend, version=version)
        cols, rows = read(p)
        yaml = os.path.join(os.path.dirname(self.data_dir), f"{self.system}.yaml")
        per_node = None
        with open(yaml) as f:
            for ln in f:
                if ln.strip().startswith("num_gpus_per_node:"):
                    per_node = int(ln.split(":", 1)[1].split("#")[0])
        if not per_node:
            raise SystemExit(f"{yaml}: no num_gpus_per_node")
        msg = {"dispatch": lambda h: h + h // 128 * 4 + 16, "combine": lambda h: 2 * h}
        out = []
        for r in rows:
            for ph in ("dispatch", "combine"):
                b = r["num_token"] * r["num_topk"] * msg[ph](r["hidden_size"])
                t = r[f"{ph}_avg_t_us"]
                # The source's own bandwidth column fixes what it counted as bytes.
                counted = r[f"{ph}_bandwidth_gbps"] * 1e3 * t
                if abs(counted / b - 1) > 1e-3:
                    raise SystemExit(f"{p}: {ph} bytes {b} disagree with bandwidth x time {counted:.0f}")
                out.append((ph, r["hidden_size"], r["num_topk"], r["num_experts"], r["node_num"] * per_node,
                            r["num_token"], b, f"{t:.3f}"))
        out.sort(key=lambda x: (x[0] != "dispatch", x[1], x[2], x[3], x[4], x[5]))
        n = write_csv(os.path.join(self.out, "deepep_ll.csv"),
                      ["phase", "hidden", "topk", "experts", "ranks", "num_tokens", "bytes", "latency_us"], out)
        self.notes.append(("deepep_ll.csv", self.rel(p), len(rows), n, [
            f"source columns: {', '.join(cols)}; times in us (avg_t_us), bandwidths in GB/s",
            f"source: framework {distinct(rows, 'framework')} {distinct(rows, 'version')}, device "
            f"{distinct(rows, 'device')}, kernel_source {distinct(rows, 'kernel_source')}, op {distinct(rows, 'op_name')}, "
            f"node_num {distinct(rows, 'node_num')} ({per_node} GPUs per node: {self.system}.yaml)",
            f"(hidden, topk, experts) present: {' '.join(f'{a}/{b}/{c}' for a, b, c in sorted({(r['hidden_size'], r['num_topk'], r['num_experts']) for r in rows}))}",
            f"num_token per rank: {' '.join(str(x) for x in distinct(rows, 'num_token'))}",
            "each source row gives two rows here (dispatch, combine); bytes checked against the source's "
            "bandwidth x time (dispatch message = hidden + hidden/128 x 4 + 16 B, combine = 2 x hidden B)",
        ]))


def find_license(wheel_dir):
    if not wheel_dir:
        return None
    for pat in ("*.dist-info/licenses/LICENSE*", "*.dist-info/LICENSE*", "LICENSE*"):
        hits = sorted(glob.glob(os.path.join(wheel_dir, pat)))
        if hits:
            return hits[0]
    return None


def lic_origin(path):
    """'<name>.dist-info/licenses/LICENSE' when the file sits in a dist-info folder, else the path."""
    parts = os.path.abspath(path).split(os.sep)
    for i, part in enumerate(parts):
        if part.endswith(".dist-info"):
            return "/".join(parts[i:]) + " (PyPI wheel of that name)"
    return path


def wheel_version(wheel_dir):
    if not wheel_dir:
        return None, None
    for meta in glob.glob(os.path.join(wheel_dir, "aiconfigurator_core-*.dist-info", "METADATA")):
        name = ver = lic = None
        with open(meta) as f:
            for line in f:
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    ver = line.split(":", 1)[1].strip()
                elif line.startswith("License-Expression:") or line.startswith("License:"):
                    lic = line.split(":", 1)[1].strip()
        return f"{name} {ver}", lic
    return None, None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel-dir", help="the unzipped aiconfigurator-core wheel (holds aiconfigurator_core/)")
    src.add_argument("--data-dir", help="aiconfigurator_core/systems/data itself")
    ap.add_argument("--system", default="rtx_pro_6000_server", help="AIConfigurator system folder name")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--backend-version", default="0.24.0")
    ap.add_argument("--nccl-version", default="2.29.2", help="folder under comm/nccl/")
    ap.add_argument("--tables", default="moe,mla,gemm,collectives",
                    help="comma-separated subset of moe,mla,gemm,collectives,deepep_ll")
    ap.add_argument("--license-file", help="Apache-2.0 LICENSE text to copy (default: found under --wheel-dir)")
    ap.add_argument("--wheel-file", help="the .whl the tables came from (only to record its sha256)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    data_dir = a.data_dir or os.path.join(a.wheel_dir, "aiconfigurator_core", "systems", "data")
    if not os.path.isdir(data_dir):
        raise SystemExit(f"no folder {data_dir}")
    lic = a.license_file or find_license(a.wheel_dir)
    if not lic or not os.path.exists(lic):
        raise SystemExit("no LICENSE text found: pass --license-file (the aiconfigurator-core wheel has none; "
                         "use dist-info/licenses/LICENSE of the aiconfigurator==0.12.0 wheel)")
    with open(lic) as f:
        lic_text = f.read()
    if "Apache License" not in lic_text or "Version 2.0" not in lic_text:
        raise SystemExit(f"{lic} is not the Apache-2.0 text")
    os.makedirs(a.out, exist_ok=True)

    c = Converter(data_dir, a.system, a.backend, a.backend_version, a.nccl_version, a.out)
    tables = [t.strip() for t in a.tables.split(",") if t.strip()]
    for t in tables:
        if t not in ("moe", "mla", "gemm", "collectives", "deepep_ll"):
            raise SystemExit(f"unknown table {t}")
        getattr(c, t)()

    with open(os.path.join(a.out, "LICENSE"), "w") as f:
        f.write(lic_text)
    pkg, pkg_lic = wheel_version(a.wheel_dir)
    pkg = pkg or "aiconfigurator-core (version: see --wheel-dir METADATA)"
    sysyaml = os.path.join(os.path.dirname(data_dir), f"{a.system}.yaml")

    cmd = "python3 harness/aiconfigurator_tables.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    files = sorted(os.listdir(a.out))
    L = []
    L.append(f"{a.out.rstrip('/')}: AIConfigurator measured performance tables for '{a.system}', converted subset")
    L.append("=" * len(L[0]))
    L.append("")
    L.append("Source")
    L.append(f"  package     {pkg} from PyPI (`pip download --no-deps aiconfigurator-core==0.12.0`), licence "
             f"{pkg_lic or 'Apache-2.0'}; https://github.com/ai-dynamo/aiconfigurator")
    if a.wheel_file:
        L.append(f"  wheel       {os.path.basename(a.wheel_file)}  sha256 {sha256(a.wheel_file)}")
    L.append(f"  tables      under aiconfigurator_core/systems/data/{a.system}/ : backend {a.backend} "
             f"{a.backend_version}, NCCL {a.nccl_version}")
    L.append(f"  LICENSE     the Apache-2.0 text, copied from {lic_origin(lic)}")
    L.append("              (the aiconfigurator-core wheel itself ships no LICENSE file; its METADATA says "
             "License-Expression: Apache-2.0)")
    L.append("")
    L.append("Converter command (repository root; the wheel unzipped into /tmp/aic/wheel)")
    L.append(f"  {cmd}")
    L.append("  pyarrow " + __import__("pyarrow").__version__ + f", Python {sys.version.split()[0]}")
    L.append("")
    L.append("Units: every latency_us = the source's latency (milliseconds) x 1000, printed with 3 decimals. "
             "Collective sizes:")
    L.append("  the source's message_size counts ELEMENTS; bytes = elements x dtype size (half/bfloat16 2, int8 1).")
    L.append("How the numbers were collected: the wheel has no collector code or method description beyond the")
    L.append("  collection_meta.yaml files below and the system file's comments; see the AIConfigurator")
    L.append("  repository's collector/ for the method.")
    L.append("")
    L.append("Files (rows = data rows, header excluded)")
    for out_name, srcp, nin, nout, details in c.notes:
        L.append(f"  {out_name}: {nout} rows, from {srcp} ({nin} rows)")
        for d in details:
            L.append(f"      {d}")
    L.append("")
    if os.path.exists(sysyaml):
        with open(sysyaml) as f:
            y = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("# SPDX")]
        L.append(f"System description (aiconfigurator_core/systems/{a.system}.yaml, as shipped)")
        L += ["  " + ln for ln in y]
        L.append("")
    L.append("collection_meta.yaml files (as shipped, SPDX header lines dropped)")
    for d in sorted(c.metas):
        L.append(f"  --- {d}/collection_meta.yaml")
        L += ["    " + ln for ln in c.metas[d].splitlines() if ln.strip() and not ln.startswith("# SPDX")]
    L.append("")
    with open(os.path.join(a.out, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(L))

    notice = (
        f"The files in this folder are converted subsets of performance tables from NVIDIA AIConfigurator,\n"
        f"package {pkg} (PyPI), path aiconfigurator_core/systems/data/{a.system}/,\n"
        f"Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES, licensed under the Apache License,\n"
        f"Version 2.0 (see LICENSE in this folder; https://github.com/ai-dynamo/aiconfigurator).\n"
        f"\n"
        f"Changes: rows filtered to the bundled models' shapes (Kimi-K2.5; the MoE table also DeepSeek-V3,\n"
        f"MiniMax-M2.5 and Qwen3-235B), Parquet converted to CSV, latency converted from milliseconds to\n"
        f"microseconds, collective sizes converted from elements to bytes, columns renamed.\n"
        f"The conversion is done by harness/aiconfigurator_tables.py; MANIFEST.txt gives the details.\n"
    )
    with open(os.path.join(a.out, "NOTICE"), "w") as f:
        f.write(notice)
    total = sum(os.path.getsize(os.path.join(a.out, x)) for x in os.listdir(a.out))
    for x in sorted(os.listdir(a.out)):
        print(f"{os.path.join(a.out, x)}  {os.path.getsize(os.path.join(a.out, x))} B")
    print(f"total {total} B")


if __name__ == "__main__":
    main()
