#!/usr/bin/env bash
# The one-command GPU check, run on a machine with an NVIDIA GPU, its driver and CUDA 13 (runtime,
# cuBLAS, NCCL) and none of Sluice's other dependencies, from a bundle made by
# scripts/gpu-bundle.sh on a machine without a GPU:
#
#   scripts/gpu-check.sh [BUNDLE=.gpubundle/sluice-gpu-bundle.tar.xz] [OUT=gpu-check-out]
#
# Runs `sluice env`, every test labelled gpu (one log and JUnit XML each), compute-sanitizer
# memcheck over the CUDA kernel tests, `sluice bench comm` (MPI and NCCL), the demo trained on
# the GPU and on the CPU (where data/demo_corpus.txt exists), and the kernel benchmark; writes
# every log and record into OUT and a one-line verdict per step into OUT/summary.txt. Exits
# non-zero if any step failed. SLUICE_GPU_CHECK_ONLY='model|attention' runs only the steps whose
# names match.
set -uo pipefail

bundle=${1:-.gpubundle/sluice-gpu-bundle.tar.xz}
out=$(realpath -m "${2:-gpu-check-out}")
mkdir -p "$out"
start=$(date +%s)
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
sluice_gpu_unpack "$bundle" || { echo "gpu-check: cannot unpack $bundle" >&2; exit 2; }
work=$SLUICE_GPU_WORK
root=$SLUICE_GPU_ROOT
sluice_gpu_libs "$root"

# The carried Open MPI, found through OPAL_PREFIX (its layout mirrors Debian's under /usr) and run
# by absolute path, so that an MPI of this machine's own is never mixed with it.
mpirun=()
if [[ -x $root/ompi/usr/bin/orterun ]]; then
  export OPAL_PREFIX=$root/ompi/usr
  mpirun=("$root/ompi/usr/bin/orterun")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader

summary=$out/summary.txt
: >"$summary"
failed=0
step() {  # step NAME TIMEOUT_S COMMAND...: runs it, logs to OUT/NAME.log, records the verdict
  local name=$1 limit=$2
  shift 2
  # SLUICE_GPU_CHECK_ONLY (an extended regex over step names) reruns a few steps in a short lease.
  if [[ -n ${SLUICE_GPU_CHECK_ONLY:-} && ! $name =~ $SLUICE_GPU_CHECK_ONLY ]]; then return; fi
  local t0=$(date +%s.%N) rc
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if ((rc == 0)); then
    echo "PASS $name (${secs}s)" | tee -a "$summary"
  else
    failed=1
    echo "FAIL $name rc=$rc (${secs}s): $(grep -m3 -E 'FAILED|Error|error' "$out/$name.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$summary"
  fi
}

{ nvidia-smi; nvidia-smi -q -d CLOCK,POWER | head -60; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } \
  >"$out/nvidia-smi.log" 2>&1
if [[ -x $root/bin/sluice ]]; then
  step env 60 "$root/bin/sluice" env
else
  echo "SKIP env: the bundle has no sluice binary" | tee -a "$summary"
fi

for t in "$root"/tests/*; do
  name=$(basename "$t")
  case $name in
    comm_nccl_test) step "$name" 120 "${mpirun[@]:-mpirun}" -np 1 "$t" --gtest_output="xml:$out/$name.xml" ;;
    *) step "$name" 180 "$t" --gtest_output="xml:$out/$name.xml" ;;
  esac
done

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n $sanitizer ]]; then
  for t in "$root"/tests/cuda_*_test; do
    step "memcheck_$(basename "$t")" "${SLUICE_MEMCHECK_TIMEOUT:-240}" "$sanitizer" --tool memcheck --error-exitcode 1 \
      --print-limit 20 "$t" --gtest_filter="${SLUICE_MEMCHECK_FILTER:-*}"
  done
else
  echo "SKIP memcheck: compute-sanitizer not found" | tee -a "$summary"
fi

# NCCL beside MPI on this machine's one GPU (a second rank would share the GPU, which NCCL refuses).
if [[ -x $root/bin/sluice ]]; then
  step bench_comm 120 "${mpirun[@]:-mpirun}" -np 1 "$root/bin/sluice" bench comm --backends mpi,nccl \
    -b 1M -e 256M -f 4 -n 10 -w 3 --json "$out/bench_comm.json"
fi

# The demo trained on the GPU and on this machine's CPU device, from the same corpus (make it
# first: scripts/make-demo-corpus.sh data/demo_corpus.txt), for the loss curves side by side.
if [[ -x $root/bin/sluice && -f data/demo_corpus.txt ]]; then
  for device in cuda cpu; do
    step "train_demo_$device" 300 "$root/bin/sluice" train --config configs/demo_gpt.yaml \
      --run-dir "$out/demo_$device" --overwrite --set "device.type=$device" \
      --set "run.steps=${SLUICE_GPU_CHECK_DEMO_STEPS:-600}"
  done
fi

# Issue 19's offload comparison: the same 271M-parameter Llama (configs/llama_gpu_offload.yaml)
# without offload (fp32, TF32 and bf16 products), then with bf16 products at stage 3, with
# ZeRO-Offload (stage 2, the optimizer in pinned host memory), at stage 3 with the optimizer and
# then the parameters too on the host, and on NVMe (a swap folder on this machine's disk). The
# stage-2 offload run writes a Perfetto trace; a profiled run times every op on the device.
if [[ -x $root/bin/sluice && -f data/demo_corpus.txt ]]; then
  swap=$(mktemp -d /tmp/sluice-swap.XXXXXX)
  offload_run() {  # offload_run NAME OVERRIDES...
    local name=$1
    shift
    local sets=()
    for o in "$@"; do sets+=(--set "$o"); done
    step "train_offload_$name" 90 "$root/bin/sluice" train --config configs/llama_gpu_offload.yaml \
      --run-dir "$out/offload_$name" --overwrite --progress plain "${sets[@]}"
  }
  z=zero_optimization
  bf16=model.matmul_precision=bf16
  offload_run none
  offload_run none_tf32 model.matmul_precision=tf32
  offload_run none_bf16 $bf16
  offload_run none_bf16_profile $bf16 run.profile_ops=true  # device time per op in summary.json
  offload_run stage2_cpu_opt_bf16 $bf16 $z.stage=2 $z.offload_optimizer.device=cpu run.trace=true
  offload_run stage3_bf16 $bf16 $z.stage=3
  offload_run stage3_cpu_opt_bf16 $bf16 $z.stage=3 $z.offload_optimizer.device=cpu
  # Buckets of d_model^2 instead of the whole model: their copies out overlap the backward.
  offload_run stage3_cpu_opt_bf16_buckets $bf16 $z.stage=3 $z.offload_optimizer.device=cpu \
    $z.reduce_bucket_size=auto
  offload_run stage3_cpu_all_bf16 $bf16 $z.stage=3 $z.offload_optimizer.device=cpu \
    $z.offload_param.device=cpu
  offload_run stage3_nvme_all_bf16 $bf16 $z.stage=3 $z.offload_optimizer.device=nvme \
    $z.offload_optimizer.nvme_path="$swap" $z.offload_param.device=nvme $z.offload_param.nvme_path="$swap"
  rm -rf "$swap"
fi

if [[ -x $root/bin/bench_kernels ]]; then
  step bench_kernels 240 "$root/bin/bench_kernels" --json "$out/bench_kernels.json"
fi

echo "gpu-check: $(grep -c ^PASS "$summary") passed, $(grep -c ^FAIL "$summary") failed in" \
  "$(($(date +%s) - start)) s; logs in $out" | tee -a "$summary"
rm -rf "$work"
exit $failed
