#!/bin/bash
# A/B: the demo's tokens/s with two sluice binaries (A, B: paths from the environment), alternating,
# three runs each, on the same machine in one run (benchmarks/results/ab_*.md).
cd "$(dirname "$0")/.."
A=${A:-/tmp/ab_base/build/bin/sluice}; B=${B:-build/bin/sluice}
for i in 1 2 3; do
  for v in A B; do
    bin=${!v}
    $bin train --config configs/demo_gpt.yaml --run-dir /tmp/ab_run_$v --overwrite --set run.steps=150 --set run.eval_interval=0 > /tmp/ab_out_$v.log 2>&1
    tps=$(python3 -c "import json;print(json.load(open('/tmp/ab_run_$v/summary.json'))['tokens_per_s'])" 2>/dev/null)
    echo "$v run$i $tps"
  done
done
