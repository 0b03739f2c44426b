#!/usr/bin/env bash
# Full 2-GPU (or any-GPU-count) calibration run on an H200 host.
# Usage: bash harness/run_all.sh OUTDIR [phases]   phases: comma list of env,micro,coll,ref (default all)
# Writes OUTDIR/calib.tar.gz (CSVs, MANIFEST inputs, logs) and OUTDIR/traces.tar.gz.
# Per-phase wall limits (seconds) can be overridden: T_MICRO, T_COLL, T_REF.
set -u
OUT=${1:?usage: run_all.sh OUTDIR [phases]}
PHASES=${2:-env,micro,coll,ref}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H=$(cd "$(dirname "$0")" && pwd)
W=${WORK:-/tmp/decodesim_run}
rm -rf "$W"; mkdir -p "$W/calib" "$W/traces" "$OUT"
has() { [[ ",$PHASES," == *",$1,"* ]]; }
SMOKE=${SMOKE:-}
{
echo "# commands (cwd = repository root)"
has env   && echo "python3 harness/env_info.py"
has micro && echo "python3 harness/microbench.py --out CALIB ${SMOKE:+--smoke} ${MICRO_ARGS:-}"
has coll  && echo "python3 harness/collectives.py --out CALIB ${SMOKE:+--smoke} ${COLL_ARGS:-}"
has ref   && echo "python3 harness/refstep.py --out CALIB --traces TRACES ${REF_ARGS:-}"
} > "$W/calib/commands.txt"
if has env; then python3 "$H/env_info.py" > "$W/calib/env.txt" 2>&1; cat "$W/calib/env.txt"; fi
if has micro; then
  timeout -k 10 "${T_MICRO:-200}" python3 "$H/microbench.py" --out "$W/calib" ${SMOKE:+--smoke} ${MICRO_ARGS:-} 2>&1 | tee "$W/calib/microbench.log"
fi
if has coll; then
  timeout -k 10 "${T_COLL:-200}" python3 "$H/collectives.py" --out "$W/calib" ${SMOKE:+--smoke} ${COLL_ARGS:-} 2>&1 | tee "$W/calib/collectives.log"
fi
if has ref; then
  timeout -k 10 "${T_REF:-300}" python3 "$H/refstep.py" --out "$W/calib" --traces "$W/traces" ${REF_ARGS:-} 2>&1 | tee "$W/calib/refstep.log"
fi
tar -C "$W" -czf "$OUT/calib.tar.gz" calib
tar -C "$W" -czf "$OUT/traces.tar.gz" traces
ls -la "$OUT"; du -sh "$W/traces"
