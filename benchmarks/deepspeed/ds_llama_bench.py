#!/usr/bin/env python3
"""DeepSpeed's side of issue 19's comparison: the Sluice model shape as a Hugging Face
LlamaForCausalLM (random weights) trained with DeepSpeed ZeRO-3 for a few steps.

    python benchmarks/deepspeed/ds_llama_bench.py --sluice-config configs/llama_gpu_offload.yaml \
        --offload-optimizer cpu --steps 12 --json ds_cpu.json

--sluice-config is a Sluice YAML (the model section and the batch, clipping and AdamW keys are
read, Sluice's rules fill what it leaves unset) or, better, the config record Sluice itself
resolved: `sluice config check --config X.yaml --json` or a run folder's config.resolved.json.
--set key=value overrides a Sluice key as `sluice train --set` does.

One process, no launcher: torch.distributed is set up with world size 1 from environment
variables. --no-deepspeed trains the same model with torch.optim.AdamW and autocast instead (a
plain PyTorch baseline, and the path that runs where DeepSpeed is missing). Steps after the
warm-up are timed with the device synchronized; tokens/s is that of the median step, as for
Sluice's metrics.jsonl. Prints a table; --json writes the record (schema sluice.ds_llama_bench).
"""

import argparse
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
import traceback

SCHEMA = "sluice.ds_llama_bench"


# --- The Sluice config -------------------------------------------------------------------------


def _parse_scalar(text):
    """A --set value as YAML would read it (numbers, booleans, lists)."""
    try:
        import yaml

        return yaml.safe_load(text)
    except ImportError:
        try:
            return json.loads(text)
        except ValueError:
            return text


def _flatten(tree, prefix=""):
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def load_sluice_settings(path, overrides):
    """Flat {"model.d_model": 1024, ...} from a Sluice YAML or a resolved config record."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    resolved = False
    if path.endswith(".json"):
        record = json.loads(text)
        if "settings" in record:  # sluice.config_record: {"settings": {path: {"value": v}}}
            flat = {k: v.get("value") for k, v in record["settings"].items()}
            flat = {k: v for k, v in flat.items() if v is not None and v != "auto"}
            resolved = True
        else:
            flat = _flatten(record)
    else:
        import yaml

        flat = _flatten(yaml.safe_load(text) or {})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected key=value")
        flat[key.strip()] = _parse_scalar(value)
    return flat, resolved


def model_shape(flat):
    """The model and batch settings, with Sluice's rules (engine/config/config_resolve.cpp) for
    what a YAML leaves unset. A resolved record already has every value."""
    family = flat.get("model.family", "gpt2")
    if family != "llama":
        raise SystemExit(f"model.family is {family!r}: this benchmark builds a Llama only")
    d_model = int(flat.get("model.d_model", 64))
    n_head = int(flat.get("model.n_head", 4))
    d_ff = flat.get("model.d_ff")
    if d_ff is None:
        d_ff = ((2 * 4 * d_model) // 3 + 255) // 256 * 256
    seq_len = int(flat.get("model.seq_len", 64))
    betas = flat.get("optimizer.params.betas", [0.9, 0.999])
    shape = {
        "n_layer": int(flat.get("model.n_layer", 2)),
        "n_head": n_head,
        "n_kv_head": int(flat.get("model.n_kv_head", n_head)),
        "d_model": d_model,
        "d_ff": int(d_ff),
        "vocab_size": int(flat.get("model.vocab_size", 256)),
        "seq_len": seq_len,
        "max_position_embeddings": int(flat.get("model.max_position_embeddings", seq_len)),
        "rope_theta": float(flat.get("model.rope_theta", 10000.0)),
        "norm_eps": float(flat.get("model.norm_eps", 1e-5)),
        "tie_embeddings": bool(flat.get("model.tie_embeddings", False)),
        "init_std": float(flat.get("model.init_std", 0.02)),
        "activation_checkpointing": bool(flat.get("model.activation_checkpointing", False)),
        "micro_batch": int(flat.get("train_micro_batch_size_per_gpu", 1)),
        "grad_accum": int(flat.get("gradient_accumulation_steps", 1)),
        "grad_clip": float(flat.get("gradient_clipping", 0.0)),
        "optimizer": str(flat.get("optimizer.type", "AdamW")),
        "lr": float(flat.get("optimizer.params.lr", 1e-3)),
        "betas": [float(b) for b in betas],
        "eps": float(flat.get("optimizer.params.eps", 1e-8)),
        "weight_decay": float(flat.get("optimizer.params.weight_decay", 0.0)),
        "bf16": bool(flat.get("bf16.enabled", False)),
        "seed": int(flat.get("run.seed", 1234)),
        "data": flat.get("data.train_path"),
    }
    if shape["optimizer"].lower() not in ("adam", "adamw"):
        raise SystemExit(f"optimizer.type {shape['optimizer']!r}: this benchmark runs AdamW only")
    return shape


def llama_parameter_count(s):
    """Parameters of the Llama Sluice builds (no biases), to check the HF model against."""
    head_dim = s["d_model"] // s["n_head"]
    attn = s["d_model"] * head_dim * (2 * s["n_head"] + 2 * s["n_kv_head"])
    mlp = 3 * s["d_model"] * s["d_ff"]
    layer = attn + mlp + 2 * s["d_model"]
    embed = s["vocab_size"] * s["d_model"]
    head = 0 if s["tie_embeddings"] else embed
    return s["n_layer"] * layer + embed + head + s["d_model"]


# --- Model and data ----------------------------------------------------------------------------


def build_hf_config(s):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=s["vocab_size"],
        hidden_size=s["d_model"],
        intermediate_size=s["d_ff"],
        num_hidden_layers=s["n_layer"],
        num_attention_heads=s["n_head"],
        num_key_value_heads=s["n_kv_head"],
        head_dim=s["d_model"] // s["n_head"],
        max_position_embeddings=max(s["max_position_embeddings"], s["seq_len"]),
        rms_norm_eps=s["norm_eps"],
        rope_theta=s["rope_theta"],
        tie_word_embeddings=s["tie_embeddings"],
        initializer_range=s["init_std"],
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        use_cache=False,
    )
    # transformers 5 keeps the rotary base in rope_parameters; older versions in rope_theta.
    rope = getattr(cfg, "rope_parameters", None)
    if isinstance(rope, dict):
        rope["rope_theta"] = s["rope_theta"]
        rope.setdefault("rope_type", "default")
    return cfg


class Batches:
    """Micro-batches of seq_len + 1 tokens: bytes of a corpus at random offsets (as Sluice reads
    data/demo_corpus.txt with vocab 256), or uniform random tokens."""

    def __init__(self, s, path, device, seed):
        import torch

        self.torch = torch
        self.s = s
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.tokens = None
        self.source = "random tokens"
        if path and os.path.isfile(path) and s["vocab_size"] >= 256:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) > s["seq_len"] + 1:
                self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
                self.source = f"bytes of {path} ({len(data)} bytes)"

    def next(self):
        torch = self.torch
        b, t = self.s["micro_batch"], self.s["seq_len"]
        if self.tokens is None:
            w = torch.randint(0, self.s["vocab_size"], (b, t + 1), generator=self.gen)
        else:
            starts = torch.randint(0, self.tokens.numel() - t - 1, (b,), generator=self.gen)
            w = torch.stack([self.tokens[i : i + t + 1] for i in starts.tolist()])
        w = w.to(self.device, non_blocking=True)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def checkpoint_layers(model):
    """Recompute every decoder layer in the backward (transformers 5 renamed the method)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def lm_loss(model, x, y, vocab):
    import torch.nn.functional as F

    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))


# --- Environment -------------------------------------------------------------------------------


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def single_process_env():
    """torch.distributed with world size 1, as a launcher would set it up."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)


def host_rss_bytes():
    """(current, peak) resident set of this process, from /proc."""
    cur = peak = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    return cur, peak


def machine_info(torch, device):
    info = {
        "host": platform.node(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        props = torch.cuda.get_device_properties(device)
        info["gpu_memory_bytes"] = props.total_memory
        try:
            import subprocess

            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            info["driver"] = None
    return info


# --- DeepSpeed ---------------------------------------------------------------------------------


def ds_config(s, args):
    zero = {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": args.bucket_size,
        "stage3_prefetch_bucket_size": args.bucket_size,
        "stage3_param_persistence_threshold": args.persistence_threshold,
        "sub_group_size": args.sub_group_size,
    }
    for which, device in (("offload_optimizer", args.offload_optimizer),
                          ("offload_param", args.offload_param)):
        if device == "none":
            continue
        zero[which] = {"device": device, "pin_memory": True}
        if device == "nvme":
            zero[which]["nvme_path"] = args.nvme_path
    cfg = {
        "train_micro_batch_size_per_gpu": s["micro_batch"],
        "gradient_accumulation_steps": s["grad_accum"],
        "train_batch_size": s["micro_batch"] * s["grad_accum"],
        "gradient_clipping": s["grad_clip"],
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if s["bf16"]:
        cfg["bf16"] = {"enabled": True}
    if args.offload_optimizer == "nvme" or args.offload_param == "nvme":
        cfg["aio"] = {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
                      "single_submit": False, "overlap_events": True}
    return cfg


def adamw_kwargs(s):
    return {"lr": s["lr"], "betas": tuple(s["betas"]), "eps": s["eps"],
            "weight_decay": s["weight_decay"]}


def choose_optimizer(s, args, record):
    """DeepSpeed's own optimizer where it has one to build (CPU Adam for host and NVMe offload,
    JIT-compiled here), else torch's fused AdamW as a client optimizer. Returns (the client
    optimizer or None, the config's "optimizer" section or None)."""
    import torch

    offloaded = args.offload_optimizer != "none"
    want = args.optimizer
    if want == "auto":
        want = "ds" if offloaded else "torch"
    if want == "ds":
        name = "CPUAdamBuilder" if offloaded else "FusedAdamBuilder"
        t0 = time.perf_counter()
        try:
            from deepspeed.ops import op_builder

            getattr(op_builder, name)().load(verbose=True)
            record["ds_op_build_s"] = time.perf_counter() - t0
            record["optimizer"] = ("DeepSpeedCPUAdam (adamw)" if offloaded else
                                   "DeepSpeed FusedAdam (adamw)")
            params = dict(adamw_kwargs(s), betas=list(s["betas"]))
            return None, {"type": "AdamW", "params": params}
        except Exception as e:  # a JIT build fails with many exception types
            record["ds_op_error"] = f"{name}: {type(e).__name__}: {e}"
            print(f"ds_llama_bench: {name} did not build: {e}", file=sys.stderr)
            traceback.print_exc()
            if args.optimizer == "ds":
                raise
    # torch's AdamW on the device, or on the host through DeepSpeed's client-optimizer path
    # (zero_force_ds_cpu_optimizer false): the fallback where CPU Adam cannot be built.
    fused = not offloaded and torch.cuda.is_available()
    record["optimizer"] = f"torch.optim.AdamW({'fused' if fused else 'foreach'})"
    if offloaded:
        record["optimizer"] += " on the host (DeepSpeed CPU Adam not used)"
    return ("torch", fused), None


def run_deepspeed(s, args, record, torch, device):
    import deepspeed

    record["versions"]["deepspeed"] = deepspeed.__version__
    single_process_env()
    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo",
                               auto_mpi_discovery=False)
    cfg = ds_config(s, args)
    client, opt_section = choose_optimizer(s, args, record)
    if opt_section is not None:
        cfg["optimizer"] = opt_section
    else:
        cfg["zero_force_ds_cpu_optimizer"] = False
    record["ds_config"] = cfg
    from transformers import LlamaForCausalLM

    hf_cfg = build_hf_config(s)
    dtype = torch.bfloat16 if s["bf16"] else torch.float32
    t0 = time.perf_counter()
    # Parameters partitioned as they are made, as a ZeRO-3 user builds a model that does not fit.
    with deepspeed.zero.Init(config_dict_or_path=cfg, dtype=dtype, enabled=args.zero_init):
        model = LlamaForCausalLM(hf_cfg)
    if s["activation_checkpointing"]:
        checkpoint_layers(model)
    optimizer = None
    if client is not None:
        _, fused = client
        optimizer = torch.optim.AdamW(model.parameters(), fused=fused or None,
                                      **adamw_kwargs(s))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           model_parameters=model.parameters(), config=cfg)
    record["init_s"] = time.perf_counter() - t0
    record["parameters"] = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                               for p in engine.module.parameters())

    def step(x_y_list):
        loss = None
        for x, y in x_y_list:
            loss = lm_loss(engine, x, y, s["vocab_size"])
            engine.backward(loss)
            engine.step()
        return loss

    return step, engine


def run_pytorch(s, args, record, torch, device):
    from transformers import LlamaForCausalLM

    record["versions"]["deepspeed"] = None
    t0 = time.perf_counter()
    model = LlamaForCausalLM(build_hf_config(s)).to(device)
    if s["activation_checkpointing"]:
        checkpoint_layers(model)
    model.train()
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), fused=fused or None, **adamw_kwargs(s))
    record["optimizer"] = f"torch.optim.AdamW({'fused' if fused else 'foreach'}), fp32 master"
    record["init_s"] = time.perf_counter() - t0
    record["parameters"] = sum(p.numel() for p in model.parameters())
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=s["bf16"])

    def step(x_y_list):
        loss = None
        for x, y in x_y_list:
            with autocast:
                loss = lm_loss(model, x, y, s["vocab_size"]) / len(x_y_list)
            loss.backward()
        if s["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss * len(x_y_list)

    return step, model


# --- Main --------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sluice-config", required=True,
                   help="Sluice YAML, or a resolved config record (sluice config check --json, "
                        "a run folder's config.resolved.json)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a Sluice setting (repeatable), e.g. model.n_layer=2")
    p.add_argument("--offload-optimizer", choices=("none", "cpu", "nvme"), default="none")
    p.add_argument("--offload-param", choices=("none", "cpu", "nvme"), default="none")
    p.add_argument("--nvme-path", default="/tmp/ds-nvme-swap",
                   help="swap folder for nvme offload (default %(default)s)")
    ckpt = p.add_mutually_exclusive_group()
    ckpt.add_argument("--activation-checkpointing", dest="ckpt", action="store_true",
                      default=None, help="checkpoint every decoder layer (default: the config's "
                      "model.activation_checkpointing)")
    ckpt.add_argument("--no-activation-checkpointing", dest="ckpt", action="store_false")
    p.add_argument("--optimizer", choices=("auto", "ds", "torch"), default="auto",
                   help="auto: DeepSpeed CPU Adam with optimizer offload (torch AdamW on the "
                        "host if it cannot be built, recorded), torch fused AdamW without; ds: "
                        "DeepSpeed's (FusedAdam without offload needs nvcc), fail if it cannot "
                        "be built; torch: torch.optim.AdamW as DeepSpeed's client optimizer")
    p.add_argument("--no-deepspeed", action="store_true",
                   help="plain PyTorch: AdamW (fp32 master) and bf16 autocast, no ZeRO")
    p.add_argument("--no-zero-init", dest="zero_init", action="store_false",
                   help="build the whole model first, then let DeepSpeed partition it")
    p.add_argument("--steps", type=int, default=12, help="optimizer steps (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3,
                   help="first steps left out of the timing (default %(default)s)")
    p.add_argument("--data", default=None,
                   help="byte corpus (default: the config's data.train_path where it exists; "
                        "'random' for random tokens)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--bucket-size", type=float, default=5e8,
                   help="reduce and prefetch bucket elements (default %(default)g)")
    p.add_argument("--persistence-threshold", type=float, default=1e5)
    p.add_argument("--sub-group-size", type=float, default=1e9)
    p.add_argument("--label", default=None, help="name of this run in the record")
    p.add_argument("--json", default=None, help="write the record here")
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error("--steps must be more than --warmup")
    return args


def summarize(record, times, losses):
    tokens = record["tokens_per_step"]
    timed = times[record["warmup"]:]
    med = statistics.median(timed)
    record["step_times_s"] = times
    record["median_step_s"] = med
    record["mean_step_s"] = statistics.fmean(timed)
    record["tokens_per_s"] = tokens / med
    record["tokens_per_s_mean"] = tokens / record["mean_step_s"]
    record["losses"] = losses
    finite = all(math.isfinite(x) for x in losses)
    # The correctness check: a finite loss that starts near ln(vocab) (random weights).
    start_ok = abs(losses[0] - math.log(record["shape"]["vocab_size"])) < 1.0
    record["check"] = "ok" if finite and start_ok else (
        "non-finite loss" if not finite else f"first loss {losses[0]:.3f} far from ln(vocab)")


def print_table(r):
    gib = 1024.0 ** 3
    rows = [
        ("run", r["label"]),
        ("engine", r["engine"]),
        ("device", r["machine"].get("gpu") or r["machine"].get("cpu") or "cpu"),
        ("parameters", f"{r.get('parameters', 0):,} (Sluice's count {r['sluice_parameters']:,})"),
        ("shape", "L{n_layer} d{d_model} h{n_head}/kv{n_kv_head} ff{d_ff} V{vocab_size}".format(
            **r["shape"])),
        ("batch", f"{r['shape']['micro_batch']} x {r['shape']['seq_len']} x accum "
                  f"{r['shape']['grad_accum']} = {r['tokens_per_step']} tokens/step"),
        ("precision", "bf16, fp32 master" if r["shape"]["bf16"] else "fp32"),
        ("activation checkpointing", "yes" if r["shape"]["activation_checkpointing"] else "no"),
        ("offload", f"optimizer {r['offload_optimizer']}, params {r['offload_param']}"),
        ("optimizer", r.get("optimizer")),
        ("data", r.get("data")),
        ("tokens/s (median step)", f"{r['tokens_per_s']:,.0f}"),
        ("step median / mean", f"{r['median_step_s'] * 1e3:.1f} ms / "
                               f"{r['mean_step_s'] * 1e3:.1f} ms "
                               f"({r['steps'] - r['warmup']} timed steps)"),
        ("peak device memory", f"{r['peak_device_bytes'] / gib:.2f} GiB"
         if r.get("peak_device_bytes") is not None else "-"),
        ("host RSS peak", f"{r['host_rss_peak_bytes'] / gib:.2f} GiB"),
        ("loss first / last", f"{r['losses'][0]:.4f} / {r['losses'][-1]:.4f}"),
        ("check", r["check"]),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def main(argv=None):
    args = parse_args(argv)
    flat, resolved = load_sluice_settings(args.sluice_config, args.set)
    s = model_shape(flat)
    if args.ckpt is not None:
        s["activation_checkpointing"] = args.ckpt
    import torch

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    torch.manual_seed(s["seed"])
    engine_name = "pytorch" if args.no_deepspeed else "deepspeed-zero3"
    record = {
        "schema": SCHEMA,
        "version": 1,
        "label": args.label or (engine_name + "_" + args.offload_optimizer),
        "engine": engine_name,
        "sluice_config": args.sluice_config,
        "sluice_config_resolved": resolved,
        "overrides": args.set,
        "shape": s,
        "sluice_parameters": llama_parameter_count(s),
        "offload_optimizer": "none" if args.no_deepspeed else args.offload_optimizer,
        "offload_param": "none" if args.no_deepspeed else args.offload_param,
        "steps": args.steps,
        "warmup": args.warmup,
        "tokens_per_step": s["micro_batch"] * s["grad_accum"] * s["seq_len"],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
        "env": {k: os.environ[k] for k in ("DS_BUILD_OPS", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR",
                                           "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
                if k in os.environ},
    }
    record["machine"] = machine_info(torch, device)
    record["versions"] = {"torch": torch.__version__,
                          "transformers": record["machine"]["transformers"]}
    data_path = None if args.data == "random" else (args.data or s["data"])
    batches = Batches(s, data_path, device, s["seed"])
    record["data"] = batches.source
    if device.type == "cuda":
        # Products in bf16 on the tensor cores either way; fp32 matmuls would use TF32 here.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    runner = run_pytorch if args.no_deepspeed else run_deepspeed
    step, _ = runner(s, args, record, torch, device)
    if record["parameters"] != record["sluice_parameters"]:
        print(f"ds_llama_bench: warning: the HF model has {record['parameters']:,} parameters, "
              f"Sluice's {record['sluice_parameters']:,}", file=sys.stderr)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times, losses = [], []
    for i in range(args.steps):
        micro = [batches.next() for _ in range(s["grad_accum"])]
        sync()
        t0 = time.perf_counter()
        loss = step(micro)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach().float().item()))
        if i == args.warmup - 1 and device.type == "cuda":
            record["peak_device_bytes_warmup"] = torch.cuda.max_memory_allocated(device)
        print(f"step {i + 1:>4}/{args.steps}  loss {losses[-1]:.4f}  {times[-1] * 1e3:8.1f} ms  "
              f"{record['tokens_per_step'] / times[-1]:>10,.0f} tokens/s", flush=True)
    summarize(record, times, losses)
    record["peak_device_bytes"] = (torch.cuda.max_memory_allocated(device)
                                   if device.type == "cuda" else None)
    record["peak_device_reserved_bytes"] = (torch.cuda.max_memory_reserved(device)
                                            if device.type == "cuda" else None)
    record["host_rss_bytes"], record["host_rss_peak_bytes"] = host_rss_bytes()
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print_table(record)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    return 0 if record["check"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
