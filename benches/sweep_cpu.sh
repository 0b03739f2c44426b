#!/usr/bin/env bash
# CPU per scenario and peak RSS of `decodesim sweep ... --format csv --output FILE`, the release
# binary as a user runs it. Usage: benches/sweep_cpu.sh [SCENARIOS...]   (default: 100000 1000000)
# Each size runs two grids of the default Kimi-K2.5 scenario:
#   contexts: batch 1..=250 x N/250 distinct contexts (every (batch, context) pair new: the
#             attention of every scenario priced from scratch, the hard case);
#   knobs:    batch 1..=250 x N/2000 contexts x 2 NCCL protocols x graphs on/off x k 0..1
#             (each (batch, context) shared by 8 scenarios);
#   dp16:     DeepSeek-V3 on h200-hgx-2node-ib, --tp 1 --dp 16 --ep-comm rdma-ll, batch 1..=250
#             x N/250 contexts (data-parallel attention with wide expert parallelism: each new
#             batch draws the ranks' expert loads);
#   pp18:     Kimi-K2.5 on h200-hgx-18node-ib, --tp 8 --pp 18, batch 1..=250 x N/250 contexts
#             (a 144-GPU pipeline: each distinct stage played once per micro-batch size and
#             kept for the batches that share it, the micro-batch schedule composed per row);
#   tbo16:    the dp16 layout with two-batch overlap (--tbo on), batch 2..=251 x N/250 contexts
#             (both micro-batches interleaved until their layers repeat at each knot context,
#             a multiple of 8, eight side by side; the rows between knots interpolated).
# CPU = user + sys of the process (GNU time when present, else bash's `times` of the child);
# peak RSS = GNU time's maximum resident set, else the child's VmHWM read through /proc.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=target/release/decodesim
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(100000 1000000)

run() { # label n args...
    local label=$1 n=$2; shift 2
    local f="$OUT/rows.csv"
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f "%U %S %M" -o "$OUT/time" "$BIN" sweep "$@" --max-work 1000000000000 \
            --format csv --output "$f"
        read -r user sys kb < "$OUT/time"
    else
        # No GNU time: a child shell runs the sweep, reads its VmHWM, and `times` gives CPU.
        kb=$(bash -c '"$@" & pid=$!; peak=0; while kill -0 $pid 2>/dev/null; do
                v=$(awk "/VmHWM/{print \$2}" /proc/$pid/status 2>/dev/null || echo 0)
                [ "${v:-0}" -gt "$peak" ] && peak=$v; sleep 0.05; done; wait $pid; echo $peak' _ \
                "$BIN" sweep "$@" --max-work 1000000000000 --format csv --output "$f")
        read -r user sys < <(times | tail -1 | sed 's/m/ /g; s/s//g' | awk '{print $1*60+$2, $3*60+$4}')
    fi
    local rows=$(($(wc -l < "$f") - 1))
    [ "$rows" -eq "$n" ] || { echo "$label: $rows rows, expected $n" >&2; exit 1; }
    awk -v l="$label" -v n="$n" -v u="$user" -v s="$sys" -v kb="$kb" 'BEGIN {
        printf "%-9s %9d scenarios: %.3f us CPU per scenario (user %.2f s + sys %.2f s), peak RSS %.1f MB\n",
            l, n, (u + s) * 1e6 / n, u, s, kb / 1024 }'
}

for n in "${sizes[@]}"; do
    c=$((n / 250)); [ "$c" -ge 1 ] || c=1
    run contexts $((250 * c)) --batch 1..=250 --context "1000..=$((999 + c))"
    k=$((n / 2000)); [ "$k" -ge 1 ] || k=1
    run knobs $((2000 * k)) --batch 1..=250 --context "1000..=$((999 + k))" \
        --nccl-proto LL,Simple --cuda-graphs on,off --draft-tokens 0,1 --acceptance-rate 0.5
    run dp16 $((250 * c)) --model deepseek-v3 --system h200-hgx-2node-ib --tp 1 --dp 16 \
        --ep-comm rdma-ll --batch 1..=250 --context "1000..=$((999 + c))"
    run pp18 $((250 * c)) --model kimi-k2.5 --system h200-hgx-18node-ib --tp 8 --pp 18 \
        --batch 1..=250 --context "1000..=$((999 + c))"
    run tbo16 $((250 * c)) --model deepseek-v3 --system h200-hgx-2node-ib --tp 1 --dp 16 \
        --ep-comm rdma-ll --tbo on --batch 2..=251 --context "1000..=$((999 + c))"
done
