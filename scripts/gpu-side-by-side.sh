#!/usr/bin/env bash
# Issue 19's side-by-side run, in one command on a GPU machine without internet that has the
# driver, CUDA, PyTorch and transformers: Sluice (`sluice train` from the bundle of
# scripts/gpu-bundle.sh) and DeepSpeed ZeRO-3 (installed from the folder of scripts/ds-bundle.sh,
# its CPU Adam JIT-built here) train the same Llama shape with the same micro-batch, sequence
# length, bf16 and activation checkpointing, with the optimizer on the device, in host memory and
# on NVMe. Writes OUT/side_by_side.md (tokens/s of both and the ratio Sluice/DeepSpeed), its
# JSON, every log and record, and summary.txt (one verdict per step).
#
#   scripts/gpu-side-by-side.sh [BUNDLE=.gpubundle/sluice-gpu-bundle.tar.xz] [OUT=side-by-side-out]
#                               [DS_BUNDLE=.gpubundle/ds]
#
# Knobs (environment):
#   SBS_CONFIG    the Sluice config (default configs/llama_gpu_offload.yaml, 271M parameters)
#   SBS_SET       extra key=value overrides for both sides, space-separated (e.g. model.n_layer=32)
#   SBS_SLUICE_SET  overrides for Sluice alone (default model.matmul_precision=bf16: the products on
#                 the tensor cores, as DeepSpeed's bf16 has them)
#   SBS_VARIANTS  what to run, in order (default "cpu none cpu_ckpt nvme"): none, cpu, nvme (where
#                 the optimizer state lives), a _ckpt suffix adds activation checkpointing
#   SBS_STEPS, SBS_WARMUP   optimizer steps per run and the first ones left out of the timing
#                 (default 12 and 3)
#   SBS_BUDGET_S  wall-clock budget of the whole script (default 450): a step gets what is left at
#                 most, and a step that would start with under 20 s left is skipped
#   SBS_TORCH     1 (default): also a plain-PyTorch run of the same model (no ZeRO), as an anchor
#   SBS_PYTHON    the Python that has torch and transformers (default: the first that imports both)
#   SBS_TORCH_EXTENSIONS_DIR  where DeepSpeed's JIT-built ops go (default: a fresh folder; name a
#                 lasting one to reuse the builds in a second run on the same machine)
# DeepSpeed degrades, Sluice does not depend on it: if DeepSpeed will not install or its CPU Adam
# will not build, the reason is in summary.txt and the table, and every Sluice run still runs
# (DeepSpeed then offloads with torch's AdamW on the host, so labelled in the table).
set -uo pipefail

bundle=${1:-.gpubundle/sluice-gpu-bundle.tar.xz}
out=$(realpath -m "${2:-side-by-side-out}")
ds_bundle=$(realpath -m "${3:-.gpubundle/ds}")
config=${SBS_CONFIG:-configs/llama_gpu_offload.yaml}
steps=${SBS_STEPS:-12}
warmup=${SBS_WARMUP:-3}
budget=${SBS_BUDGET_S:-450}
read -r -a variants <<<"${SBS_VARIANTS:-cpu none cpu_ckpt nvme}"
read -r -a user_sets <<<"${SBS_SET:-}"
read -r -a sluice_only_sets <<<"${SBS_SLUICE_SET-model.matmul_precision=bf16}"
repo=$(pwd)
bench=$repo/benchmarks/deepspeed/ds_llama_bench.py
mkdir -p "$out"
start=$(date +%s)
summary=$out/summary.txt
: >"$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - ($(date +%s) - start))); }

# step NAME LIMIT COMMAND...: runs it with at most LIMIT seconds (and never past the budget), logs
# to OUT/NAME.log, records the verdict. Returns the command's status (1 when skipped).
step() {
  local name=$1 limit=$2
  shift 2
  local rest
  rest=$(left)
  if ((rest < 20)); then
    note "SKIP $name: the ${budget}s budget is spent"
    echo "skipped: the ${budget}s budget was spent" >"$out/why_$name.txt"
    return 1
  fi
  ((limit > rest)) && limit=$rest
  local t0 rc secs
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if ((rc == 0)); then
    note "PASS $name (${secs}s)"
  else
    failed=1
    local why
    ((rc == 124 || rc == 137)) && why="timed out after ${limit}s" ||
      why=$(grep -m3 -E 'Error|error|FAILED|Traceback' "$out/$name.log" | tr '\n' ' ' | cut -c1-300)
    note "FAIL $name rc=$rc (${secs}s): $why"
    echo "rc=$rc: $why" >"$out/why_$name.txt"
  fi
  return $rc
}

# --- The machine --------------------------------------------------------------------------------
{
  nvidia-smi
  nvidia-smi -q -d CLOCK,POWER | head -40
  lscpu
  free -g
  df -h /tmp
  echo "c++: $(command -v c++ g++ | head -1) $(c++ --version 2>/dev/null | head -1)"
  echo "nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)"
  echo "libaio.h: $(ls /usr/include/libaio.h 2>/dev/null)"
} >"$out/machine.log" 2>&1

# --- Sluice --------------------------------------------------------------------------------------
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
sluice=
base_ld=${LD_LIBRARY_PATH:-}
if sluice_gpu_unpack "$bundle" && [[ -x $SLUICE_GPU_ROOT/bin/sluice ]]; then
  sluice_gpu_libs "$SLUICE_GPU_ROOT"
  sluice_ld=$LD_LIBRARY_PATH
  # The bundle's libraries are for sluice alone: PyTorch loads its own CUDA libraries.
  export LD_LIBRARY_PATH=$base_ld
  sluice=$SLUICE_GPU_ROOT/bin/sluice
  step sluice_env 60 env LD_LIBRARY_PATH="$sluice_ld" "$sluice" env
else
  note "FAIL sluice: no sluice binary in $bundle; DeepSpeed runs alone"
  failed=1
fi

# The corpus both sides read (bytes, vocabulary 256); a made one where the repository has none.
corpus=$repo/data/demo_corpus.txt
if [[ ! -s $corpus ]]; then
  corpus=${SLUICE_GPU_WORK:-/tmp}/corpus.txt
  bash scripts/make-demo-corpus.sh "$corpus" >/dev/null 2>&1 ||
    head -c 24000000 /dev/urandom | base64 -w 120 >"$corpus"
  note "NOTE data/demo_corpus.txt missing: both sides read $corpus ($(du -h "$corpus" | cut -f1))"
fi
swap=$(mktemp -d /tmp/sbs-swap.XXXXXX)

# --- DeepSpeed: a venv over this machine's torch, the carried wheels, no network ------------------
py=
for p in ${SBS_PYTHON:-} python3 python /opt/conda/bin/python /usr/local/bin/python3 /usr/bin/python3; do
  command -v "$p" >/dev/null 2>&1 || continue
  if "$p" -c 'import torch, transformers' >/dev/null 2>&1; then py=$(command -v "$p"); break; fi
done
venv=${SLUICE_GPU_WORK:-$(mktemp -d)}/dsvenv
ds_ok=0
# shellcheck disable=SC2317  # run through `bash -c "$(declare -f install_ds) ..."` below
install_ds() {
  set -e
  echo "python with torch: $py"
  "$py" -c 'import sys, torch, transformers; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available()); print("transformers", transformers.__version__)'
  "$py" -m venv --system-site-packages "$venv" || "$py" -m venv --system-site-packages --without-pip "$venv"
  # Where torch lives in a venv of its own, --system-site-packages does not reach it: a .pth puts
  # that interpreter's site folders after the new venv's own, so the carried packages win.
  local site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$py" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() + [site.getusersitepackages()]))' \
    >"$site/zz-base-python.pth"
  export DS_BUILD_OPS=0
  "$venv/bin/python" -m pip install --no-index --find-links "$ds_bundle" deepspeed ||
    "$venv/bin/python" -m pip install --no-index --find-links "$ds_bundle" --no-build-isolation \
      "$(find "$ds_bundle" -maxdepth 1 -name 'deepspeed-*.tar.gz' | head -1)"
  "$venv/bin/python" -c 'import deepspeed, torch; print("deepspeed", deepspeed.__version__, "torch", torch.__file__)'
  "$venv/bin/python" -c 'import sysconfig, os; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print("Python.h:", h, os.path.exists(h))'
  PATH=$venv/bin:$PATH timeout 120 "$venv/bin/ds_report" || true
}
if [[ -z $py ]]; then
  note "FAIL ds_install: no Python here imports both torch and transformers (set SBS_PYTHON)"
  echo "no Python with torch and transformers" >"$out/why_ds_install.txt"
  failed=1
elif [[ ! -d $ds_bundle ]]; then
  note "FAIL ds_install: no DeepSpeed bundle at $ds_bundle (scripts/ds-bundle.sh makes it)"
  failed=1
elif step ds_install 180 bash -c "$(declare -f install_ds); py='$py' venv='$venv' ds_bundle='$ds_bundle'; install_ds"; then
  ds_ok=1
fi

# The environment of every DeepSpeed step: the venv's ninja first, ops JIT-built into a private
# folder, and the carried libaio where this machine has no libaio-dev (CPATH and LIBRARY_PATH
# reach both DeepSpeed's probe and torch's extension build).
ds_env=(env "PATH=$venv/bin:$PATH" PYTHONUNBUFFERED=1 DS_BUILD_OPS=0 "LD_LIBRARY_PATH=$base_ld"
  "TORCH_EXTENSIONS_DIR=${SBS_TORCH_EXTENSIONS_DIR:-${SLUICE_GPU_WORK:-/tmp}/torch_extensions}")
if [[ ! -e /usr/include/libaio.h && -d $ds_bundle/libaio ]]; then
  ds_env+=("CPATH=$ds_bundle/libaio/include${CPATH:+:$CPATH}"
    "LIBRARY_PATH=$ds_bundle/libaio/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    "LD_LIBRARY_PATH=$ds_bundle/libaio/lib${base_ld:+:$base_ld}")
fi
# Before torch 2.6 an extension build holds a lock file that a killed build leaves behind, and
# every later build of that op waits on it forever: remove them after a failed DeepSpeed step
# (the steps run one at a time; newer torch locks with flock and the files are harmless).
ext_dir=${SBS_TORCH_EXTENSIONS_DIR:-${SLUICE_GPU_WORK:-/tmp}/torch_extensions}
ds_step() {  # ds_step NAME LIMIT COMMAND...
  step "$@" && return 0
  find "$ext_dir" -maxdepth 2 -name lock -delete 2>/dev/null
  return 1
}
jit() {  # jit BUILDER: JIT-builds one DeepSpeed op (cached for the runs after it)
  ds_step "ds_jit_$1" 240 "${ds_env[@]}" "$venv/bin/python" -c \
    "from deepspeed.ops import op_builder; op_builder.$1().load(verbose=True)"
}
# Without its CPU Adam, DeepSpeed still offloads, with torch's AdamW on the host (the table says
# so) rather than trying the build again in every run.
ds_optimizer=auto
if ((ds_ok)) && ! jit CPUAdamBuilder; then ds_optimizer=torch; fi
aio=untried

# --- The runs ------------------------------------------------------------------------------------
printf '%s\n' "${variants[@]}" >"$out/variants.txt"
run_variant() {  # run_variant NAME: Sluice, then DeepSpeed, on one variant
  local v=$1 offload=${1%_ckpt} ckpt=false
  [[ $v == *_ckpt ]] && ckpt=true
  local z=zero_optimization
  local sets=("${user_sets[@]}" "$z.stage=3" "model.activation_checkpointing=$ckpt"
    "run.steps=$steps" run.log_interval=1 run.eval_interval=0 checkpoint.save_final=false
    "data.train_path=$corpus")
  case $offload in
    none) ;;
    cpu) sets+=("$z.offload_optimizer.device=cpu") ;;
    nvme) sets+=("$z.offload_optimizer.device=nvme" "$z.offload_optimizer.nvme_path=$swap/sluice") ;;
    *) note "SKIP $v: unknown variant"; return ;;
  esac
  mkdir -p "$swap/sluice" "$swap/ds"
  local set_args=() sluice_args=() s
  for s in "${sets[@]}"; do set_args+=(--set "$s"); done
  for s in "${sluice_only_sets[@]}"; do sluice_args+=(--set "$s"); done
  # The shape both sides train: Sluice's own resolution of the config, or the YAML and the same
  # overrides where there is no sluice binary.
  local shape=(--sluice-config "$config" "${set_args[@]}")
  if [[ -n $sluice ]]; then
    if env LD_LIBRARY_PATH="$sluice_ld" "$sluice" config check --config "$config" "${set_args[@]}" "${sluice_args[@]}" \
      --json >"$out/config_$v.json" 2>"$out/config_$v.err"; then
      shape=(--sluice-config "$out/config_$v.json")
    fi
    step "sluice_$v" 150 env LD_LIBRARY_PATH="$sluice_ld" "$sluice" train --config "$config" \
      --run-dir "$out/sluice_$v" --overwrite --progress plain "${set_args[@]}" "${sluice_args[@]}"
    rm -rf "${swap:?}/sluice"/*
  fi
  # NVMe: the async_io op is built after Sluice's run, so that a slow build cannot cost it.
  if ((ds_ok)) && [[ $offload == nvme && $aio == untried ]]; then
    if jit AsyncIOBuilder; then aio=ok; else aio=failed; fi
  fi
  if ((ds_ok)) && [[ $offload == nvme && $aio != ok ]]; then
    note "SKIP ds_$v: DeepSpeed's async_io op is not built (ds_jit_AsyncIOBuilder in summary.txt)"
    echo "DeepSpeed's async_io op is not built: $(cat "$out/why_ds_jit_AsyncIOBuilder.txt" 2>/dev/null)" \
      >"$out/why_ds_$v.txt"
  elif ((ds_ok)); then
    ds_step "ds_$v" 200 "${ds_env[@]}" "$venv/bin/python" "$bench" "${shape[@]}" \
      --offload-optimizer "$offload" --nvme-path "$swap/ds" --steps "$steps" --warmup "$warmup" \
      --optimizer "$ds_optimizer" --label "deepspeed_$v" --json "$out/ds_$v.json"
    rm -rf "${swap:?}/ds"/*
  fi
}
for v in "${variants[@]}"; do
  run_variant "$v"
done
if [[ ${SBS_TORCH:-1} == 1 && -n $py ]]; then
  step torch 150 "${ds_env[@]}" "$py" "$bench" --sluice-config "$config" "${user_sets[@]/#/--set=}" \
    --set "data.train_path=$corpus" --no-deepspeed --steps "$steps" --warmup "$warmup" \
    --label pytorch --json "$out/torch.json"
fi

"${py:-python3}" "$repo/benchmarks/deepspeed/side_by_side_table.py" "$out" --warmup "$warmup" \
  >"$out/table.log" 2>&1 || note "FAIL table: $(tail -3 "$out/table.log" | tr '\n' ' ')"
cat "$out/side_by_side.md" 2>/dev/null
note "gpu-side-by-side: $(grep -c ^PASS "$summary") passed, $(grep -c ^FAIL "$summary") failed in" \
  "$(($(date +%s) - start)) s; logs in $out"
rm -rf "$swap" "${SLUICE_GPU_WORK:-/nonexistent}"
exit $failed
