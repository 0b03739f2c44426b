#!/usr/bin/env bash
# 8-GPU run (machine kind nvidia-h200-x8), in two calls of < 10 minutes each:
#   bash harness/run_x8.sh $OUT tp8    collectives over 8 ranks + reference step at TP=8 (3 NCCL settings)
#   bash harness/run_x8.sh $OUT tp4    collectives over 4 ranks + reference step at TP=4 (GPUs 0-3)
# The harness scripts use every GPU they see, so TP=4 runs with CUDA_VISIBLE_DEVICES=0,1,2,3.
# Each call writes $OUT/calib_<part>.tar.gz and $OUT/traces_<part>.tar.gz.  On the workstation:
#   mkdir -p data/calibration/h200-x8 data/traces/h200-x8
#   for p in tp8 tp4; do tar -xzf calib_$p.tar.gz -C /tmp; tar -xzf traces_$p.tar.gz -C /tmp; done
#   { cat /tmp/calib_tp8/collectives.csv; tail -n +2 /tmp/calib_tp4/collectives.csv; } > data/calibration/h200-x8/collectives.csv
#   { cat /tmp/calib_tp8/reference_steps.csv; tail -n +2 /tmp/calib_tp4/reference_steps.csv; } > data/calibration/h200-x8/reference_steps.csv
#   mkdir -p data/traces/h200-x8/tp8 data/traces/h200-x8/tp4
#   cp /tmp/traces_tp8/* data/traces/h200-x8/tp8/; cp /tmp/traces_tp4/* data/traces/h200-x8/tp4/
#   (then write both MANIFEST.txt files as for h200)
# Trace names carry the setting but not the TP, so the TP=8 and TP=4 traces go to separate folders: the file
# named in a reference_steps.csv row (trace_file_rank0) lies in data/traces/h200-x8/tp<tp>/.
set -u
OUT=${1:?usage: run_x8.sh OUTDIR tp8|tp4}
PART=${2:?usage: run_x8.sh OUTDIR tp8|tp4}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H=$(cd "$(dirname "$0")" && pwd)
W=/tmp/decodesim_x8
C="$W/calib_$PART"; T="$W/traces_$PART"
rm -rf "$C" "$T"; mkdir -p "$C" "$T" "$OUT"
python3 "$H/env_info.py" > "$C/env.txt" 2>&1
case $PART in
  tp8)
    echo "timeout 240 python3 harness/collectives.py --out CALIB" > "$C/commands.txt"
    timeout -k 10 240 python3 "$H/collectives.py" --out "$C" 2>&1 | tee "$C/collectives.log"
    echo "timeout 300 python3 harness/refstep.py --out CALIB --traces TRACES" >> "$C/commands.txt"
    timeout -k 10 300 python3 "$H/refstep.py" --out "$C" --traces "$T" 2>&1 | tee "$C/refstep.log" ;;
  tp4)
    export CUDA_VISIBLE_DEVICES=0,1,2,3
    S=default/default/on,LL/Ring/on,LL128/Ring/on,Simple/Ring/on,LL/Tree/on,Simple/Tree/on,default/default/off,LL/Ring/off
    echo "CUDA_VISIBLE_DEVICES=0,1,2,3 timeout 200 python3 harness/collectives.py --out CALIB --settings $S" > "$C/commands.txt"
    timeout -k 10 200 python3 "$H/collectives.py" --out "$C" --settings "$S" 2>&1 | tee "$C/collectives.log"
    echo "CUDA_VISIBLE_DEVICES=0,1,2,3 timeout 300 python3 harness/refstep.py --out CALIB --traces TRACES" >> "$C/commands.txt"
    timeout -k 10 300 python3 "$H/refstep.py" --out "$C" --traces "$T" 2>&1 | tee "$C/refstep.log" ;;
  *) echo "unknown part $PART"; exit 2 ;;
esac
tar -C "$W" -czf "$OUT/calib_$PART.tar.gz" "calib_$PART"
tar -C "$W" -czf "$OUT/traces_$PART.tar.gz" "traces_$PART"
ls -la "$OUT"; du -sh "$T"
