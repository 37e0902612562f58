#!/usr/bin/env python3
"""The PyTorch and DeepSpeed sides of the CPU side-by-side (side_by_side.py): Sluice's GPT-2 as
a transformers GPT2LMHeadModel (random init, no dropout, tied embeddings) trained for a few steps
on windows of a nanoGPT uint16 token file, one JSON record on stdout's last line.

    hf_trainer.py --system pytorch --precision bf16 --shape shape.json --tokens train.bin
    hf_trainer.py --system deepspeed --precision bf16 --nvme-path /tmp/swap ...

--shape is the JSON the driver writes (model, batch and AdamW settings, the same it gives Sluice).
pytorch: torch.optim.AdamW (foreach), fp32 weights, bf16 under torch.autocast when asked.
deepspeed: ZeRO-3 in one process (gloo, DeepSpeed's CPU accelerator), the optimizer state swapped
to NVMe (DeepSpeedCPUAdam, async_io; both JIT-built on first use into TORCH_EXTENSIONS_DIR).
Each step is timed whole (forward, backward, clipping, optimizer); tokens/s is that of the median
step after --warmup.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

# The DeepSpeed benchmark's AdamW settings and single-process torch.distributed set-up.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deepspeed"))
from ds_llama_bench import adamw_kwargs, single_process_env  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--system", choices=("pytorch", "deepspeed"), required=True)
    p.add_argument("--precision", choices=("fp32", "bf16"), required=True)
    p.add_argument("--shape", required=True, help="the driver's shape JSON")
    p.add_argument("--tokens", required=True, help="nanoGPT uint16 token file")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True, help="first steps left out of the timing")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--nvme-path", help="swap folder of the optimizer state (deepspeed)")
    args = p.parse_args()
    if args.steps <= args.warmup:
        p.error("--steps must be more than --warmup")
    if args.system == "deepspeed" and not args.nvme_path:
        p.error("--system deepspeed needs --nvme-path")
    return args


def build_model(torch, s):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["d_model"],
                     n_inner=s["d_ff"], n_positions=s["seq_len"], vocab_size=s["vocab_size"],
                     layer_norm_epsilon=s["norm_eps"], initializer_range=s["init_std"],
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     tie_word_embeddings=True, use_cache=False)
    return GPT2LMHeadModel(cfg)


def lm_loss(torch, logits, y):
    """Mean cross-entropy over the tokens, from fp32 logits."""
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def ds_config(s, args):
    """The ZeRO section side_by_side.py also gives Sluice, plus DeepSpeed's optimizer."""
    cfg = {
        "train_micro_batch_size_per_gpu": s["micro_batch"],
        "gradient_accumulation_steps": 1,
        "train_batch_size": s["micro_batch"],
        "gradient_clipping": s["grad_clip"],
        "optimizer": {"type": "AdamW", "params": dict(adamw_kwargs(s), betas=list(s["betas"]))},
        "zero_optimization": dict(s["zero3_nvme"]),
        "aio": dict(s["aio"]),
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    cfg["zero_optimization"]["offload_optimizer"] = dict(
        cfg["zero_optimization"]["offload_optimizer"], nvme_path=args.nvme_path)
    if args.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def make_pytorch(torch, s, args, record):
    model = build_model(torch, s)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True, **adamw_kwargs(s))
    record["optimizer"] = "torch.optim.AdamW(foreach), fp32 weights"
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    params = list(model.parameters())

    def step(x, y):
        with autocast:
            loss = lm_loss(torch, model(input_ids=x).logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return model, step


def make_deepspeed(torch, s, args, record):
    import deepspeed

    record["versions"]["deepspeed"] = deepspeed.__version__
    single_process_env()
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    cfg = ds_config(s, args)
    record["ds_config"] = cfg
    # Built whole with the seed PyTorch's run uses (the same weights), then partitioned by
    # deepspeed.initialize: under zero.Init, transformers' weight init would see the empty
    # partitioned tensors unless an HfDeepSpeedConfig is made (the loss started near 100).
    model = build_model(torch, s)
    engine, optimizer, _, _ = deepspeed.initialize(model=model,
                                                   model_parameters=model.parameters(),
                                                   config=cfg)
    record["optimizer"] = type(optimizer.optimizer if hasattr(optimizer, "optimizer")
                               else optimizer).__name__

    def step(x, y):
        loss = lm_loss(torch, engine(input_ids=x).logits, y)
        engine.backward(loss)
        engine.step()
        return loss

    return engine.module, step


def main():
    args = parse_args()
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    with open(args.shape, encoding="utf-8") as f:
        s = json.load(f)
    torch.manual_seed(s["seed"])
    record = {"system": args.system, "precision": args.precision, "threads": args.threads,
              "torch_threads": torch.get_num_threads(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "versions": {"torch": torch.__version__}}
    import transformers

    record["versions"]["transformers"] = transformers.__version__
    t0 = time.perf_counter()
    make = make_pytorch if args.system == "pytorch" else make_deepspeed
    model, step = make(torch, s, args, record)
    record["init_s"] = time.perf_counter() - t0
    record["parameters"] = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())

    tokens = torch.from_numpy(np.fromfile(args.tokens, dtype=np.uint16).astype(np.int64))
    gen = torch.Generator().manual_seed(s["seed"])
    b, t = s["micro_batch"], s["seq_len"]
    times, losses = [], []
    for i in range(args.steps):
        starts = torch.randint(0, tokens.numel() - t - 1, (b,), generator=gen).tolist()
        w = torch.stack([tokens[j:j + t + 1] for j in starts])
        x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
        t0 = time.perf_counter()
        loss = step(x, y)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach().float()))
        print(f"{args.system} {args.precision} step {i + 1}/{args.steps} loss {losses[-1]:.4f} "
              f"{times[-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    med = statistics.median(times[args.warmup:])
    record.update(step_times_s=times, losses=losses, median_step_s=med,
                  tokens_per_s=b * t / med, loss_finite=all(map(math.isfinite, losses)))
    print(json.dumps(record))
    return 0 if record["loss_finite"] else 1


if __name__ == "__main__":
    sys.exit(main())
