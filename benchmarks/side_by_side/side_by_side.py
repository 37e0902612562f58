#!/usr/bin/env python3
"""CPU side-by-side (issue 17 point 6): the same GPT-2 trained by Sluice, by PyTorch (fp32, and
bf16 autocast) and by DeepSpeed ZeRO-3 with the optimizer state on NVMe, in one run, for the
demo model (configs/demo_gpt.yaml) and a GPT-2 small shape; tokens/s and same-run ratios.

    benchmarks/side_by_side/make_env.sh             # build/sbs-env: torch, transformers, deepspeed
    python3 benchmarks/side_by_side/side_by_side.py --json out.json --markdown out.md

Every system gets the same model (Sluice's GPT-2; a transformers GPT2LMHeadModel with random
weights for PyTorch and DeepSpeed), micro-batch, AdamW settings (lr, betas, eps, weight decay,
gradient clipping; no schedule), threads (OMP_NUM_THREADS, torch.set_num_threads and Sluice's
device.threads) and token file (random ids written once into the work folder, nanoGPT uint16).
The two ZeRO-3 runs get the same zero_optimization and aio sections (DeepSpeed's keys; Sluice
reads them as they are). Each run trains --steps steps; the first --warmup are left out and the
run's figure is the tokens/s of its median step. With --rounds N every system runs N times,
rounds interleaved (the order rotates), and a system's figure is the median of its runs'.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEMA = "sluice.cpu_side_by_side"

SYSTEMS = ("sluice_bf16", "sluice_fp32", "pytorch_fp32", "pytorch_bf16", "sluice_z3_nvme",
           "deepspeed_z3_nvme")
# (numerator, denominator): the same precision and the same ZeRO setting on both sides.
RATIOS = (("sluice_fp32", "pytorch_fp32"), ("sluice_bf16", "pytorch_bf16"),
          ("sluice_bf16", "pytorch_fp32"), ("sluice_z3_nvme", "deepspeed_z3_nvme"))
# The GPT-2 small shape, over the demo config's optimizer settings.
GPT2_SET = {"model.n_layer": 12, "model.n_head": 12, "model.d_model": 768, "model.seq_len": 256,
            "train_micro_batch_size_per_gpu": 2, "model.vocab_size": 50257}
SHAPE_MEMORY = {"demo": "1GiB", "gpt2": "8GiB"}
# DeepSpeed's own defaults for the aio section, given explicitly to both.
AIO = {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": False,
       "overlap_events": True}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    p.add_argument("--python", default=os.path.join(ROOT, "build/sbs-env/bin/python"),
                   help="the venv's Python (make_env.sh)")
    p.add_argument("--shapes", nargs="+", choices=("demo", "gpt2"), default=["demo", "gpt2"])
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--steps", type=int, nargs=2, default=[100, 8], metavar=("DEMO", "GPT2"),
                   help="steps per run for each shape (default %(default)s)")
    p.add_argument("--warmup", type=int, nargs=2, default=[20, 3], metavar=("DEMO", "GPT2"),
                   help="first steps left out of the timing (default %(default)s)")
    p.add_argument("--rounds", type=int, nargs=2, default=[3, 1], metavar=("DEMO", "GPT2"),
                   help="runs per system, interleaved (default %(default)s)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cpu-gemm", choices=("blas", "deterministic"), default="blas",
                   help="Sluice's device.cpu_gemm (default %(default)s: the library GEMM, as "
                        "PyTorch uses oneDNN)")
    p.add_argument("--work-dir", help="runs, token file and NVMe swap (default: a temp folder, "
                                      "removed at the end)")
    p.add_argument("--torch-extensions-dir", default=os.path.join(ROOT, "build/sbs-torch-ext"),
                   help="DeepSpeed's JIT-built ops, kept between runs (default %(default)s)")
    p.add_argument("--json", help="write the record here")
    p.add_argument("--markdown", help="write the table here")
    return p.parse_args()


# --- Shapes and data ---------------------------------------------------------------------------


def resolved_shape(args, name):
    """The model, batch and optimizer settings as Sluice resolves them (sluice config check)."""
    cmd = [args.sluice, "config", "check", "--config", os.path.join(ROOT, "configs/demo_gpt.yaml"),
           "--json"]
    if name == "gpt2":
        for key, value in GPT2_SET.items():
            cmd += ["--set", f"{key}={value}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    v = {k: e.get("value") for k, e in json.loads(out)["settings"].items()}
    return {
        "name": name, "n_layer": v["model.n_layer"], "n_head": v["model.n_head"],
        "d_model": v["model.d_model"], "d_ff": v["model.d_ff"], "seq_len": v["model.seq_len"],
        "vocab_size": v["model.vocab_size"], "norm_eps": v["model.norm_eps"],
        "init_std": v["model.init_std"], "micro_batch": v["train_micro_batch_size_per_gpu"],
        "lr": v["optimizer.params.lr"], "betas": v["optimizer.params.betas"],
        "eps": v["optimizer.params.eps"], "weight_decay": v["optimizer.params.weight_decay"],
        "grad_clip": v["gradient_clipping"], "seed": v["run.seed"],
        "zero3_nvme": {"stage": 3, "offload_optimizer": {"device": "nvme", "pin_memory": True}},
        "aio": AIO,
    }


def write_tokens(path, vocab, count, seed):
    """Uniform random token ids, nanoGPT's uint16 format: read by every system."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        array("H", (rng.randrange(vocab) for _ in range(count))).tofile(f)


# --- Runs --------------------------------------------------------------------------------------


def thread_env(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=args.torch_extensions_dir)
    return env


def sluice_config(s, system, tokens, run_dir, swap, args):
    cfg = {
        "train_micro_batch_size_per_gpu": s["micro_batch"],
        "gradient_accumulation_steps": 1,
        "gradient_clipping": s["grad_clip"],
        "optimizer": {"type": "AdamW", "params": {"lr": s["lr"], "betas": s["betas"],
                                                  "eps": s["eps"],
                                                  "weight_decay": s["weight_decay"]}},
        "bf16": {"enabled": system != "sluice_fp32"},
        "model": {"family": "gpt2", "n_layer": s["n_layer"], "n_head": s["n_head"],
                  "d_model": s["d_model"], "seq_len": s["seq_len"],
                  "vocab_size": s["vocab_size"]},
        "data": {"train_path": tokens, "format": "nanogpt_u16", "val_fraction": 0.0},
        "device": {"type": "cpu", "memory_limit": SHAPE_MEMORY[s["name"]],
                   "threads": args.threads, "cpu_gemm": args.cpu_gemm},
        "run": {"dir": run_dir, "steps": s["steps"], "seed": s["seed"], "eval_interval": 0,
                "log_interval": 1},
        "checkpoint": {"save_final": False},
    }
    if system == "sluice_z3_nvme":
        zero = json.loads(json.dumps(s["zero3_nvme"]))
        zero["offload_optimizer"]["nvme_path"] = swap
        cfg["zero_optimization"] = zero
        cfg["aio"] = s["aio"]
    return cfg


def run_sluice(s, system, tokens, work, args):
    run_dir = os.path.join(work, "runs", f"{s['name']}_{system}")
    swap = os.path.join(work, "swap", f"{s['name']}_{system}")
    os.makedirs(swap, exist_ok=True)
    config = os.path.join(work, f"{s['name']}_{system}.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(sluice_config(s, system, tokens, run_dir, swap, args), f, indent=1)
    proc = subprocess.run([args.sluice, "train", "--config", config, "--progress", "off",
                           "--overwrite"], env=thread_env(args), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sluice {system}: exit {proc.returncode}\n{proc.stdout[-3000:]}"
                           f"{proc.stderr[-3000:]}")
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        steps = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    times = [m["step_time_s"] for m in steps]
    med = statistics.median(times[s["warmup"]:])
    shutil.rmtree(swap, ignore_errors=True)
    return {"step_times_s": times, "losses": [m["loss"] for m in steps], "median_step_s": med,
            "tokens_per_s": s["micro_batch"] * s["seq_len"] / med,
            "parameters": summary.get("parameters"), "kernels": summary.get("kernels")}


def run_hf(s, system, tokens, work, args):
    shape_file = os.path.join(work, f"{s['name']}_shape.json")
    with open(shape_file, "w", encoding="utf-8") as f:
        json.dump(s, f)
    engine, _, precision = system.partition("_")
    cmd = [args.python, os.path.join(HERE, "hf_trainer.py"), "--system", engine, "--shape",
           shape_file, "--tokens", tokens, "--steps", str(s["steps"]), "--warmup",
           str(s["warmup"]), "--threads", str(args.threads)]
    swap = None
    if engine == "deepspeed":
        precision = "bf16"  # the ZeRO-3 runs train in bf16 as Sluice's does
        swap = os.path.join(work, "swap", f"{s['name']}_{system}")
        os.makedirs(swap, exist_ok=True)
        cmd += ["--nvme-path", swap]
    cmd += ["--precision", precision]
    proc = subprocess.run(cmd, env=thread_env(args), capture_output=True, text=True)
    if swap:
        shutil.rmtree(swap, ignore_errors=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{system}: exit {proc.returncode}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def measure(s, system, tokens, work, args):
    runner = run_sluice if system.startswith("sluice") else run_hf
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        r = runner(s, system, tokens, work, args)
    except (RuntimeError, OSError) as e:
        print(f"side_by_side: {s['name']} {system} failed: {e}", file=sys.stderr)
        r = {"error": str(e)[-2000:]}
    r.update(wall_s=time.perf_counter() - t0, loadavg_before=load_before,
             loadavg_after=os.getloadavg())
    figure = f"{r['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in r else "FAILED"
    print(f"side_by_side: {s['name']:<5} {system:<18} {figure:>18}  ({r['wall_s']:.0f} s, "
          f"load {r['loadavg_before'][0]:.2f})", flush=True)
    return r


# --- Report ------------------------------------------------------------------------------------


def machine():
    info = {"host": platform.node(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                info["cpu"] = value.strip()
            if key.strip() == "Flags":
                flags = value.split()
                info["isa"] = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16",
                                           "amx_bf16", "amx_tile") if f in flags]
    except OSError:
        pass
    return info


def summarize(results, shapes):
    table = {}
    for s in shapes:
        per = {}
        for system, runs in results[s["name"]].items():
            figures = [r["tokens_per_s"] for r in runs if "tokens_per_s" in r]
            per[system] = statistics.median(figures) if figures else None
        ratios = {f"{a}/{b}": per[a] / per[b] for a, b in RATIOS
                  if per.get(a) and per.get(b)}
        table[s["name"]] = {"tokens_per_s": per, "ratios": ratios}
    return table


def markdown(table, shapes, systems):
    lines = ["| system | " + " | ".join(f"{s['name']} tokens/s" for s in shapes) + " |",
             "|---|" + "---:|" * len(shapes)]
    for system in systems:
        cells = [table[s["name"]]["tokens_per_s"].get(system) for s in shapes]
        lines.append(f"| {system} | " + " | ".join(f"{c:,.0f}" if c else "failed"
                                                     for c in cells) + " |")
    for a, b in RATIOS:
        if a in systems and b in systems:
            cells = [table[s["name"]]["ratios"].get(f"{a}/{b}") for s in shapes]
            lines.append(f"| {a} / {b} | " + " | ".join(f"{c:.2f}x" if c else "-"
                                                          for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    for path in (args.sluice, args.python):
        if not os.path.exists(path):
            raise SystemExit(f"side_by_side: {path} is missing (ninja -C build sluice; "
                             "benchmarks/side_by_side/make_env.sh)")
    work = args.work_dir or tempfile.mkdtemp(prefix="sluice-sbs-")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.torch_extensions_dir, exist_ok=True)
    shapes = []
    for name in args.shapes:
        s = resolved_shape(args, name)
        i = 0 if name == "demo" else 1
        s.update(steps=args.steps[i], warmup=args.warmup[i], rounds=args.rounds[i])
        shapes.append(s)
    record = {"schema": SCHEMA, "version": 1,
              "date": datetime.date.today().isoformat(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
              "argv": sys.argv, "threads": args.threads, "sluice_cpu_gemm": args.cpu_gemm,
              "shapes": shapes, "runs": {}}
    for s in shapes:
        tokens = os.path.join(work, f"{s['name']}_tokens.bin")
        write_tokens(tokens, s["vocab_size"], 1 << 20, s["seed"])
        runs = record["runs"][s["name"]] = {system: [] for system in args.systems}
        for r in range(s["rounds"]):
            k = r % len(args.systems)
            for system in args.systems[k:] + args.systems[:k]:
                runs[system].append(measure(s, system, tokens, work, args))
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record["table"] = summarize(record["runs"], shapes)
    text = markdown(record["table"], shapes, args.systems)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    failed = any("error" in r for runs in record["runs"].values() for rs in runs.values()
                 for r in rs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
