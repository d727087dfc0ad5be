#!/bin/bash
# Training throughput (sequences/s) of one process against data-parallel ranks
# (docs/distributed.md): 1 process x 2 threads with 1 and 2 sequences per step, and
# 2 Gloo ranks x 1 thread, at the CPU preset and the paper setting. Run it alone on an idle
# machine, from the repository root, after the build:  bench/dist_throughput.sh [REPEATS]
set -euo pipefail
K=${KEYCLD:-$PWD/build/keycld}
REPEATS=${1:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keycld-dist-throughput-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CONFIGS=$PWD/configs
(cd "$WORK" && "$K" generate --env pendulum --runs 20 --frames 50 --size 32 --seed 11 --out data >/dev/null \
  && "$K" generate --env pendulum --runs 20 --frames 50 --size 64 --seed 11 --out data >/dev/null)
Q="--config $CONFIGS/cpu-quick/pendulum-none.toml --data $WORK/data/pendulum-none-32px-20x50-seed11.h5 --integrator-warmup-epochs 0 --steps 60"
P="--config $CONFIGS/paper/pendulum-none.toml --data $WORK/data/pendulum-none-64px-20x50-seed11.h5 --steps 14"
for rep in $(seq "$REPEATS"); do
  for setting in cpu-quick paper; do
    if [ $setting = cpu-quick ]; then A=$Q; else A=$P; fi
    for mode in 1x2-b1 1x2-b2 2x1-b2; do
      out=$WORK/runs/$setting-$mode-$rep
      case $mode in
        1x2-b1) "$K" train $A --threads 2 --out "$out" >"$out.log" 2>&1 ;;
        1x2-b2) "$K" train $A --threads 2 --batch-sequences 2 --out "$out" >"$out.log" 2>&1 ;;
        2x1-b2) "$K" train $A --threads 1 --nproc 2 --out "$out" >"$out.log" 2>&1 ;;
      esac
      /usr/bin/python3 - "$out" "$setting" "$mode" "$rep" <<'PY'
import json, statistics, sys
run, setting, mode, rep = sys.argv[1:]
b = 1 if mode.endswith("b1") else 2
steps = [json.loads(l)["seconds"] for l in open(run + "/metrics.jsonl") if '"type":"step"' in l]
m = statistics.median(steps[3:])  # the first steps warm up
print(f"{setting:9s} {mode} repeat {rep}: median step {m:.4f} s over {len(steps) - 3} steps, "
      f"{b / m:.3f} sequences/s")
PY
    done
  done
done
