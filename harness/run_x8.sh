#!/usr/bin/env bash
# Future 8-GPU run (kind nvidia-h200-x8).  The harness scripts use every GPU they see, so TP=4 is
# run with CUDA_VISIBLE_DEVICES=0,1,2,3 and TP=8 with all eight.  Results go to
# data/calibration/h200-x8 and data/traces/h200-x8 once unpacked from OUTDIR.
# Usage: bash harness/run_x8.sh OUTDIR
set -u
OUT=${1:?usage: run_x8.sh OUTDIR}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H=$(cd "$(dirname "$0")" && pwd)
W=/tmp/decodesim_x8; rm -rf "$W"; mkdir -p "$W/calib" "$W/traces" "$OUT"
python3 "$H/env_info.py" > "$W/calib/env.txt" 2>&1
# collectives at 8 and 4 ranks (same schema; nranks column tells them apart)
timeout -k 10 240 python3 "$H/collectives.py" --out "$W/calib/n8" 2>&1 | tee "$W/calib/collectives_n8.log"
CUDA_VISIBLE_DEVICES=0,1,2,3 timeout -k 10 200 python3 "$H/collectives.py" --out "$W/calib/n4" \
  --settings default/default/on,LL/Ring/on,LL128/Ring/on,Simple/Ring/on,LL/Tree/on,default/default/off \
  2>&1 | tee "$W/calib/collectives_n4.log"
{ cat "$W/calib/n8/collectives.csv"; tail -n +2 "$W/calib/n4/collectives.csv"; } > "$W/calib/collectives.csv"
# reference step, TP=8 then TP=4 (TP=4 needs 27 GB weights + KV per rank)
timeout -k 10 280 python3 "$H/refstep.py" --out "$W/calib/tp8" --traces "$W/traces" 2>&1 | tee "$W/calib/refstep_tp8.log"
CUDA_VISIBLE_DEVICES=0,1,2,3 timeout -k 10 280 python3 "$H/refstep.py" --out "$W/calib/tp4" --traces "$W/traces" \
  --settings default,ll_ring 2>&1 | tee "$W/calib/refstep_tp4.log"
{ cat "$W/calib/tp8/reference_steps.csv"; tail -n +2 "$W/calib/tp4/reference_steps.csv"; } > "$W/calib/reference_steps.csv"
tar -C "$W" -czf "$OUT/calib.tar.gz" calib
tar -C "$W" -czf "$OUT/traces.tar.gz" traces
ls -la "$OUT"
# Then, on the workstation: mkdir -p data/calibration/h200-x8 data/traces/h200-x8 and unpack:
#   tar -xzf calib.tar.gz -C /tmp && cp /tmp/calib/*.csv /tmp/calib/env.txt data/calibration/h200-x8/
#   tar -xzf traces.tar.gz -C /tmp && cp /tmp/traces/* data/traces/h200-x8/
