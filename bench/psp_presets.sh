#!/usr/bin/env bash
# Reproduces the simulation experiments of the PSP work (Wang, Catterall, Mortier: "Probabilistic
# Synchronous Parallel") with `meshtrain simulate`, and prints their tables:
#   1. barrier comparison: 200 nodes, 200 virtual s, beta = 10, SSP staleness 4, all five policies;
#   2. beta sweep for pBSP: 0, 1, 2, 4, 8, 16, 32, 64;
#   3. model error (synthetic task) of pSSP vs BSP with stragglers;
#   4. scale: 10 000 nodes for 100 virtual s under pSSP (wall and CPU time);
#   5. membership: 1000 nodes running SWIM, one node crashes; detection and dissemination times;
#   6. determinism: preset 1 twice, outputs compared byte for byte.
# Compute model of the presets: 1 s mean steps, gamma per-step times (CV 0.3) around per-node
# means that differ persistently (CV 0.2), 5% stragglers 4x slower; pBSP/pSSP re-sample every
# 100 ms (--probe-timeout). SVG plots and CSV-free JSON go to OUTDIR.
#
# Usage: bench/psp_presets.sh [MESHTRAIN_BINARY] [OUTDIR] [--quick]
#   --quick skips the 10 000-node and 1000-node membership runs.
set -euo pipefail

BIN=${1:-build/cli/meshtrain}
OUT=${2:-bench-out}
QUICK=${3:-}
mkdir -p "$OUT"
COMMON=(--step-time 1000 --dist gamma --step-cv 0.3 --node-cv 0.2 --stragglers 0.05:4
        --probe-timeout 100 --seed 1)

echo "== 1. barrier comparison: 200 nodes, 200 s, beta=10, s=4 =="
"$BIN" simulate --nodes 200 --duration 200 --barrier bsp,ssp,asp,pbsp,pssp --sample 10 \
  --staleness 4 "${COMMON[@]}" --plot "$OUT/policies.svg"
echo

echo "== 2. beta sweep (pBSP): 200 nodes, 200 s =="
"$BIN" simulate --nodes 200 --duration 200 --barrier pbsp --sample 0,1,2,4,8,16,32,64 \
  "${COMMON[@]}" --plot "$OUT/beta_sweep.svg"
echo

echo "== 3. model error with stragglers (synthetic task): 200 nodes, 100 s =="
"$BIN" simulate --nodes 200 --duration 100 --barrier bsp,ssp,pbsp,pssp,asp --sample 10 \
  --staleness 4 "${COMMON[@]}" --task synthetic --target-error 0.1 --plot "$OUT/error.svg"
echo

echo "== 6. determinism: preset 1 twice with --no-wall =="
"$BIN" simulate --nodes 200 --duration 200 --barrier bsp,ssp,asp,pbsp,pssp --sample 10 \
  --staleness 4 "${COMMON[@]}" --no-wall --format json > "$OUT/run_a.json"
"$BIN" simulate --nodes 200 --duration 200 --barrier bsp,ssp,asp,pbsp,pssp --sample 10 \
  --staleness 4 "${COMMON[@]}" --no-wall --format json > "$OUT/run_b.json"
if cmp -s "$OUT/run_a.json" "$OUT/run_b.json"; then
  echo "identical ($(wc -c < "$OUT/run_a.json") bytes, sha256 $(sha256sum "$OUT/run_a.json" | cut -c1-16))"
else
  echo "DIFFERENT"; exit 1
fi
echo

if [[ "$QUICK" == "--quick" ]]; then exit 0; fi

echo "== 4. scale: 10 000 nodes, 100 s, pssp (defaults) =="
TIMEFORMAT='wall %R s, user %U s, sys %S s'
time "$BIN" simulate --nodes 10000 --duration 100 --barrier pssp --seed 1
echo

echo "== 5. membership: 1000 nodes, SWIM lan profile, one crash at 20 s =="
time "$BIN" simulate --nodes 1000 --duration 60 --barrier pssp --membership --profile lan \
  --crash 1@20 --seed 1
