#!/usr/bin/env bash
# Full 2-GPU (or any-GPU-count) calibration run on an H200 host.
# Usage: bash harness/run_all.sh OUTDIR [phases]
#   phases: comma list, run in the order given, of env,micro,coll,ref (default env,micro,coll,ref)
# Writes OUTDIR/calib.tar.gz (CSVs, env.txt, commands.txt, logs) and OUTDIR/traces.tar.gz.
# Per-phase wall limits (s): T_MICRO, T_COLL, T_REF; extra arguments: MICRO_ARGS, COLL_ARGS, REF_ARGS;
# SMOKE=1 shrinks microbench and collectives to a few sizes.
# The exact full 2-GPU run used for data/calibration/h200 (see MANIFEST.txt there):
#   T_REF=290 T_MICRO=260 bash harness/run_all.sh $OUT env,ref,micro   (kernels.csv, launch.csv used from this call)
#   T_REF=220 T_COLL=260 bash harness/run_all.sh $OUT env,ref,coll     (collectives.csv, reference_steps.csv, traces)
set -u
OUT=${1:?usage: run_all.sh OUTDIR [phases]}
PHASES=${2:-env,micro,coll,graph,ref}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H=$(cd "$(dirname "$0")" && pwd)
W=${WORK:-/tmp/decodesim_run}
rm -rf "$W"; mkdir -p "$W/calib" "$W/traces" "$OUT"
SMOKE=${SMOKE:-}
for ph in ${PHASES//,/ }; do
  case $ph in
    env)   echo "python3 harness/env_info.py" >> "$W/calib/commands.txt"
           python3 "$H/env_info.py" > "$W/calib/env.txt" 2>&1; cat "$W/calib/env.txt" ;;
    micro) echo "timeout ${T_MICRO:-240} python3 harness/microbench.py --out CALIB ${SMOKE:+--smoke} ${MICRO_ARGS:-}" >> "$W/calib/commands.txt"
           timeout -k 10 "${T_MICRO:-240}" python3 "$H/microbench.py" --out "$W/calib" ${SMOKE:+--smoke} ${MICRO_ARGS:-} 2>&1 | tee "$W/calib/microbench.log" ;;
    coll)  echo "timeout ${T_COLL:-240} python3 harness/collectives.py --out CALIB ${SMOKE:+--smoke} ${COLL_ARGS:-}" >> "$W/calib/commands.txt"
           timeout -k 10 "${T_COLL:-240}" python3 "$H/collectives.py" --out "$W/calib" ${SMOKE:+--smoke} ${COLL_ARGS:-} 2>&1 | tee "$W/calib/collectives.log" ;;
    ref)   echo "timeout ${T_REF:-300} python3 harness/refstep.py --out CALIB --traces TRACES ${REF_ARGS:-}" >> "$W/calib/commands.txt"
           timeout -k 10 "${T_REF:-300}" python3 "$H/refstep.py" --out "$W/calib" --traces "$W/traces" ${REF_ARGS:-} 2>&1 | tee "$W/calib/refstep.log" ;;
    graph) echo "timeout ${T_GRAPH:-420} python3 harness/graph_overheads.py --out CALIB" >> "$W/calib/commands.txt"
           timeout -k 10 "${T_GRAPH:-420}" python3 "$H/graph_overheads.py" --out "$W/calib" 2>&1 | tee "$W/calib/graph_overheads.log" ;;
    *) echo "unknown phase $ph" ;;
  esac
done
tar -C "$W" -czf "$OUT/calib.tar.gz" calib
tar -C "$W" -czf "$OUT/traces.tar.gz" traces
ls -la "$OUT"; du -sh "$W/traces"
