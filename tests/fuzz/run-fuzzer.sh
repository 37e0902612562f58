#!/usr/bin/env bash
# Runs one fuzzer for a while over its seed corpus (tests/fuzz/README.md).
#   run-fuzzer.sh FUZZER SECONDS WORK_DIR [SEED_DIR...] [-- LIBFUZZER_OPTION...]
# New inputs go to WORK_DIR/corpus (kept between runs, so a long run continues where the last
# one stopped); a crash, a hang (one input over 10 s), a leak, an out-of-memory or a sanitizer
# report writes its input to WORK_DIR/artifacts/ and fails the run, naming that file. Seed folders
# that do not exist are skipped.
set -euo pipefail
if (($# < 3)); then
  echo "usage: $0 FUZZER SECONDS WORK_DIR [SEED_DIR...] [-- LIBFUZZER_OPTION...]" >&2
  exit 2
fi
fuzzer=$1 seconds=$2 work=$3
shift 3
seeds=()
while (($# > 0)) && [[ $1 != -- ]]; do
  if [[ -d $1 ]]; then seeds+=("$1"); fi
  shift
done
if (($# > 0)); then shift; fi
mkdir -p "$work/corpus" "$work/artifacts"
touch "$work/.started"
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "${seeds[@]}" || status=$?
if ((status != 0)); then
  echo "run-fuzzer: $(basename "$fuzzer") failed (exit $status); reproduce with:" >&2
  find "$work/artifacts" -type f -newer "$work/.started" -printf "  $fuzzer %p\n" >&2
fi
exit "$status"
