#!/bin/bash
# A/B of two sluice binaries on the demo model, interleaved so that both see the same machine:
# each round runs `sluice bench step` (30 timed steps) and a short `sluice train`, first with A,
# then with B. Prints per-round B/A ratios and their medians, and writes a JSON record.
#
#   scripts/ab-step.sh OLD/bin/sluice NEW/bin/sluice [rounds] [out.json] [-- --set key=value ...]
#
# The extra --set overrides go to both binaries (e.g. --set device.memory_protection=off when A
# predates the key).
set -euo pipefail
a=$1 b=$2 rounds=${3:-8} json=${4:-}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)
cfg=$here/configs/demo_gpt.yaml
data=$here/data/demo_corpus.txt
[ -f "$data" ] || "$here/scripts/make-demo-corpus.sh" "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq 1 "$rounds"); do
  for side in a b; do
    bin=$a; [ $side = b ] && bin=$b
    "$bin" bench step --config "$cfg" --set data.train_path="$data" "$@" --steps 30 --warmup 5 \
      > "$work/step_${side}_$round.txt" 2>&1
    "$bin" train --config "$cfg" --set data.train_path="$data" --set run.steps=200 \
      --set run.eval_interval=100000 --set run.log_interval=1000 "$@" \
      --run-dir "$work/train_${side}_$round" > /dev/null 2>&1
  done
done
python3 - "$work" "$rounds" "$a" "$b" "$json" <<'PY'
import json, re, statistics, sys, datetime, platform
work, rounds, a, b, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def phase(side, r, name):
    text = open(f"{work}/step_{side}_{r}.txt").read()
    return float(re.search(rf"^{name}\s+([\d.]+)", text, re.M).group(1))
def tps(side, r):
    return json.load(open(f"{work}/train_{side}_{r}/summary.json"))["tokens_per_s"]
rows = []
for r in range(1, rounds + 1):
    rows.append({side: {"step_wall_ms": phase(side, r, "wall"), "forward_ms": phase(side, r, "forward"),
                        "backward_ms": phase(side, r, "backward"), "train_tokens_per_s": tps(side, r)}
                 for side in ("a", "b")})
ratio = lambda key: [row["b"][key] / row["a"][key] for row in rows]
med = lambda key, side: statistics.median(row[side][key] for row in rows)
print(f"{'metric':22} {'A median':>10} {'B median':>10} {'B/A median':>11}  per-round B/A")
for key in ("step_wall_ms", "forward_ms", "backward_ms", "train_tokens_per_s"):
    rs = ratio(key)
    print(f"{key:22} {med(key, 'a'):10.2f} {med(key, 'b'):10.2f} {statistics.median(rs):11.3f}  "
          + " ".join(f"{x:.3f}" for x in rs))
if out:
    json.dump({"schema": "sluice.ab_step", "version": 1,
               "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": platform.node(), "a": a, "b": b, "rounds": rows,
               "median_ratio_b_over_a": {k: statistics.median(ratio(k)) for k in
                                         ("step_wall_ms", "forward_ms", "backward_ms",
                                          "train_tokens_per_s")}},
              open(out, "w"), indent=1)
PY
