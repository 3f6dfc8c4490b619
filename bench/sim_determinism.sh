#!/usr/bin/env bash
# The simulator's determinism scenarios: runs each with --no-wall through two meshtrain binaries
# and compares the outputs byte for byte (a refactor must keep them identical).
# Usage: bench/sim_determinism.sh BIN_A BIN_B [OUTDIR]   (exit 0 identical, 1 different)
set -euo pipefail
A=$1; B=$2; OUT=${3:-$(mktemp -d /tmp/sim-determinism-XXXXXX)}
scenarios=(
  "all_json|--nodes 200 --duration 60 --barrier asp,bsp,ssp,pbsp,pssp,dssp --format json --seed 1"
  "table|--nodes 100 --duration 50 --barrier pssp,dssp --sample 2,8 --seed 3"
  "loss|--nodes 150 --duration 40 --barrier pbsp,pssp --loss 0.05 --stragglers 0.1:4 --format json"
  "membership|--nodes 60 --duration 60 --barrier pssp --membership --crash 3@20 --format json --seed 5"
  "selmcast|--nodes 80 --duration 40 --barrier pssp --select selmcast --fanout 3 --format json"
  "synthetic|--nodes 40 --duration 40 --barrier pssp,bsp --task synthetic --format json --csv @CSV@"
  "mlp|--nodes 6 --duration 20 --barrier pssp --task fmnist-softmax --eval-samples 500 --format json"
  "hosts|--nodes 24 --duration 30 --barrier ssp --nodes-per-host 4 --host-cores 2 --step-overhead 5 --format json"
  "big|--nodes 1000 --duration 10 --barrier pssp,dssp --format json"
)
for side in a b; do
  bin=$A; [ "$side" = b ] && bin=$B
  mkdir -p "$OUT/$side"
  for s in "${scenarios[@]}"; do
    name=${s%%|*}; args=${s#*|}; args=${args//@CSV@/$OUT/$side/$name.csv}
    echo "[$side] $name" >&2
    # shellcheck disable=SC2086
    "$bin" simulate $args --no-wall >"$OUT/$side/$name.out" 2>/dev/null
  done
done
if diff -r "$OUT/a" "$OUT/b" >/dev/null; then
  echo "sim determinism: ${#scenarios[@]} scenarios byte-identical ($OUT)"
else
  diff -r "$OUT/a" "$OUT/b" | head -20
  echo "sim determinism: outputs differ ($OUT)"
  exit 1
fi
