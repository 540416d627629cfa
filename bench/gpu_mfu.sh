#!/usr/bin/env bash
# Tokens/s, MFU and peak memory of our trainer step for a ~1B Llama in bf16 on CUDA, with and
# without torch.compile and activation checkpointing, then every mesh layout (dp_replicate x
# dp_shard x tp x pp) the visible GPUs allow (bench/layout_step.py, beside the planner's estimate).
# Budget: under 8 minutes on one H200 (one GPU: only the trivial layout).
#
#   bash bench/gpu_mfu.sh                 # on a CUDA machine (all visible GPUs, one rank each)
#   DRY_RUN=1 bash bench/gpu_mfu.sh       # anywhere: the same configs on the tiny model on CPU
#
# Results: one JSON line per config in $OUT/gpu_mfu.jsonl (or bench/out/ when $OUT is unset),
# a table on stdout. Knobs (env): MODEL, SEQ, MB, STEPS, WARMUP, NGPU, RUN_TIMEOUT (per config),
# BUDGET (whole script, seconds; configs that would start past it are skipped), GPU (peak entry).
# MFU = tokens/s x (6 N + 12 L d T) / (n_gpus x peak), peak from trainer/metrics.py (H200: 989 TFLOP/s).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT_DIR=${OUT:-bench/out}
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/gpu_mfu.jsonl"
LOGS="$OUT_DIR/gpu_mfu_logs"
mkdir -p "$LOGS"
: > "$RESULTS"

if [ "${DRY_RUN:-0}" != "1" ] && "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  DEVICE=cuda
  MODEL=${MODEL:-1B} SEQ=${SEQ:-2048} MB=${MB:-8} STEPS=${STEPS:-15} WARMUP=${WARMUP:-5}
  NGPU=${NGPU:-$("$PY" -c 'import torch; print(torch.cuda.device_count())')}
  RUN_TIMEOUT=${RUN_TIMEOUT:-150} BUDGET=${BUDGET:-440}
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
  DEVICE=cpu
  MODEL=${MODEL:-tiny} SEQ=${SEQ:-64} MB=${MB:-2} STEPS=${STEPS:-2} WARMUP=${WARMUP:-1} NGPU=1
  RUN_TIMEOUT=${RUN_TIMEOUT:-300} BUDGET=${BUDGET:-1500} LAYOUT_RANKS=${LAYOUT_RANKS:-4}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  echo "dry run on CPU: model $MODEL, seq $SEQ, micro-batch $MB (numbers are not GPU figures)"
fi
"$PY" -c 'import torch; print("torch", torch.__version__)'

# Most informative first, so a budget cut loses the least: compiled without AC is the MFU target.
CONFIGS=(
  "compile none"
  "eager none"
  "compile selective"
  "eager full"
  "compile full"
)

# launch RANKS LIMIT LOG RESULTS MODULE FLAGS...: one torchrun; its last JSON line appended to RESULTS.
launch() {
  local ranks=$1 limit=$2 log=$3 results=$4 module=$5
  shift 5
  if timeout "$limit" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$ranks" \
       -m "$module" "$@" >"$log" 2>&1; then
    grep '^{' "$log" | tail -1 | tee -a "$results"
  else
    echo "   failed or timed out (rc $?), see $log; last lines:"
    tail -5 "$log" | sed 's/^/   /'
    return 1
  fi
}

START=$(date +%s)
for cfg in "${CONFIGS[@]}"; do
  read -r mode ac <<<"$cfg"
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 30 ]; then
    echo "== $mode, AC $ac: skipped, ${BUDGET} s budget spent"
    echo "{\"mode\": \"ours\", \"compile\": \"$mode\", \"ac\": \"$ac\", \"error\": \"skipped (budget)\"}" >>"$RESULTS"
    continue
  fi
  limit=$(( left < RUN_TIMEOUT ? left : RUN_TIMEOUT ))
  flags=(--mode ours --device "$DEVICE" --model "$MODEL" --seq-len "$SEQ" --micro-batch "$MB"
         --steps "$STEPS" --warmup "$WARMUP" --ac "$ac" --gpu "${GPU:-auto}")
  [ "$DEVICE" = cuda ] && flags+=(--bf16)
  [ "$mode" = compile ] && flags+=(--compile)
  log="$LOGS/${mode}_${ac}.log"
  echo "== $mode, AC $ac ($(( $(date +%s) - START )) s elapsed)"
  if ! launch "$NGPU" "$limit" "$log" "$RESULTS" bench.train "${flags[@]}"; then
    echo "{\"mode\": \"ours\", \"compile\": \"$mode\", \"ac\": \"$ac\", \"error\": \"failed or timed out\"}" >>"$RESULTS"
  fi
done

"$PY" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"\n{'compile':>8} {'AC':>10} {'tokens/s':>12} {'MFU':>7} {'peak GiB':>9} {'step s':>8}")
for r in rows:
    if "error" in r:
        print(f"{r['compile']:>8} {r['ac']:>10} {r['error']:>12}")
        continue
    print(f"{str(r['compile']):>8} {r['ac']:>10} {r['tokens_per_s']:>12,.0f} {r['mfu']:>7.1%} "
          f"{r['peak_mem_gib']:>9.1f} {r['step_s_median']:>8.3f}")
EOF
# Layouts: "dp_replicate dp_shard tp pp [cp]" whose product is the rank count (GPUs, or LAYOUT_RANKS on CPU).
RANKS=${LAYOUT_RANKS:-$NGPU}
LAYOUT_RESULTS="$OUT_DIR/gpu_layouts.jsonl"
: > "$LAYOUT_RESULTS"
# A fifth field is the context-parallel degree (ring attention: CUDA only, skipped on CPU).
for layout in "1 $RANKS 1 1" "2 $((RANKS / 2)) 1 1" "1 $((RANKS / 2)) 2 1" "1 $((RANKS / 2)) 1 2" \
              "1 $((RANKS / 4)) 2 2" "1 $((RANKS / 8)) 8 1" "1 $((RANKS / 8)) 4 2" \
              "1 $((RANKS / 2)) 1 1 2" "1 $((RANKS / 4)) 2 1 2"; do
  read -r rep shard tp pp cp <<<"$layout"
  cp=${cp:-1}
  if [ "$cp" -gt 1 ] && [ "$DEVICE" != cuda ]; then continue; fi
  if [ "$shard" -lt 1 ] || [ $(( rep * shard * tp * pp * cp )) -ne "$RANKS" ]; then continue; fi
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 30 ]; then echo "== layout $layout: skipped, budget spent"; continue; fi
  limit=$(( left < RUN_TIMEOUT ? left : RUN_TIMEOUT ))
  flags=(--model "$MODEL" --seq-len "$SEQ" --micro-batch "$MB" --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE"
         --dp-replicate "$rep" --dp-shard "$shard" --tp "$tp" --pp "$pp" --cp "$cp" --grad-accum $(( pp > 1 ? 2 * pp : 1 )) --gpu "${GPU:-auto}")
  [ "$DEVICE" = cuda ] && flags+=(--bf16)
  log="$LOGS/layout_${rep}_${shard}_${tp}_${pp}_${cp}.log"
  echo "== layout dp_replicate $rep x dp_shard $shard x tp $tp x pp $pp x cp $cp"
  launch "$RANKS" "$limit" "$log" "$LAYOUT_RESULTS" bench.layout_step "${flags[@]}" || true
done
echo "total $(( $(date +%s) - START )) s; results in $RESULTS and $LAYOUT_RESULTS"
