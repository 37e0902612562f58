#!/usr/bin/env python3
"""Sluice against Hugging Face transformers, both ways (the `python` ctest label).

1. transformers writes tiny random checkpoints (save_pretrained: config.json + model.safetensors):
   a GPT-2 whose position table (64) is longer than the training window (16), and a Llama with
   grouped-query attention and rope_theta 500000. `sluice train` loads each through
   model.init_from with a model section that names nothing but the window, so every size comes
   from config.json, and the loss of its first step (before any update) must equal the loss
   transformers computes on the same window, within fp32 rounding.
2. `sluice convert` writes folders that from_pretrained loads: after two steps of training the
   converted model's loss on the window equals Sluice's own loss for those weights (a run that
   starts from the converted folder), single file and sharded; with lr 0 the weights convert back
   bit for bit.
3. What Sluice cannot compute is refused, never trained as another model: a Llama config.json
   with q/k/v biases (attention_bias), a Qwen2 folder, extra tensors in the file, and a model
   section that disagrees with config.json.

Usage: hf_interop_test.py SLUICE_BINARY. Run with the venv of tests/python/make_env.sh (`make
python-env`); the ctest wrapper (run_hf_interop_test.sh) skips when that venv is missing.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers

SEQ = 16
VOCAB = 96
# fp32 rounding of a loss near log(96) = 4.56 summed over 16 tokens, with the two programs'
# different summation orders and Sluice's fp64 rotary angles: a few ulps of 4.56 (4.8e-7 each).
LOSS_TOLERANCE = 2e-5

failures = []


def check(condition, what):
    print(("ok      " if condition else "FAILED  ") + what, flush=True)
    if not condition:
        failures.append(what)


def sluice(binary, *args, expect_ok=True):
    result = subprocess.run([binary, *args], capture_output=True, text=True)
    output = result.stdout + result.stderr
    if expect_ok and result.returncode != 0:
        print(output)
        raise SystemExit(f"sluice {' '.join(args)} failed with exit code {result.returncode}")
    return result.returncode, output


def write_config(path, init_from, data, run_dir, steps, lr, extra_model=""):
    with open(path, "w") as f:
        f.write(
            "train_micro_batch_size_per_gpu: 1\n"
            "gradient_accumulation_steps: 1\n"
            f"optimizer: {{type: AdamW, params: {{lr: {lr}, weight_decay: 0.0}}}}\n"
            f"model: {{init_from: {init_from}, seq_len: {SEQ}{extra_model}}}\n"
            f"data: {{train_path: {data}, val_path: {data}, format: nanogpt_u16}}\n"
            "device: {type: cpu, memory_limit: 256MiB, threads: 1, cpu_gemm: deterministic}\n"
            f"run: {{dir: {run_dir}, steps: {steps}, seed: 1, eval_interval: 0, log_interval: 1}}\n"
        )


def first_losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def hf_loss(model, window):
    tokens = torch.tensor(window, dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=tokens[None, :SEQ]).logits[0].float()
    return F.cross_entropy(logits, tokens[1 : SEQ + 1]).item()


def train(binary, work, name, init_from, data, steps=1, lr=0.0, extra_model="", expect_ok=True):
    run_dir = os.path.join(work, "runs", name)
    config = os.path.join(work, f"{name}.yaml")
    write_config(config, init_from, data, run_dir, steps, lr, extra_model)
    code, output = sluice(binary, "train", "--config", config, "--progress", "off",
                          expect_ok=expect_ok)
    return run_dir, code, output


def gpt2(seed):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=VOCAB,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).eval()


def llama(seed, rope_theta):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_theta=rope_theta, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).eval()
    # transformers initializes norms to ones: random gains make a norm's weights matter. Its
    # small initial q and k leave the attention almost uniform, so that the rotary angles would
    # hardly show in the loss: larger ones make the positions (and rope_theta) count.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(25.0)
    return model


def main():
    binary = sys.argv[1]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    work = tempfile.mkdtemp(prefix="sluice-hf-")
    rng = np.random.default_rng(7)
    window = rng.integers(0, VOCAB, SEQ + 1).astype(np.uint16)
    data = os.path.join(work, "window.bin")
    window.tofile(data)  # nanogpt_u16: one training window of SEQ + 1 tokens
    window = window.astype(np.int64).tolist()

    # 1. transformers' checkpoints into Sluice.
    g = gpt2(1)
    g.save_pretrained(os.path.join(work, "gpt2"))
    run, _, log = train(binary, work, "gpt2", os.path.join(work, "gpt2"), data)
    ours, theirs = first_losses(run)[0], hf_loss(g, window)
    print(f"        gpt2 first-window loss: sluice {ours:.9f}, transformers {theirs:.9f}, "
          f"difference {abs(ours - theirs):.2e}")
    check(abs(ours - theirs) < LOSS_TOLERANCE, "GPT-2 (64 positions, windows of 16) loss equal")
    check("max_position_embeddings 64 (n_positions)" in log and "loaded 28 parameters from" in log,
          "the log says what was loaded from where")

    for theta in (500000.0, 10000.0):
        m = llama(2, theta)
        folder = os.path.join(work, f"llama_{int(theta)}")
        m.save_pretrained(folder)
        run, _, _ = train(binary, work, f"llama_{int(theta)}", folder, data)
        ours, theirs = first_losses(run)[0], hf_loss(m, window)
        print(f"        llama rope_theta {theta:g} first-window loss: sluice {ours:.9f}, "
              f"transformers {theirs:.9f}, difference {abs(ours - theirs):.2e}")
        check(abs(ours - theirs) < LOSS_TOLERANCE, f"Llama rope_theta {theta:g} loss equal")
        if theta == 500000.0:
            loss_500k = theirs
    check(abs(loss_500k - theirs) > 10 * LOSS_TOLERANCE,
          "rope_theta 500000 and 10000 give different losses (the setting matters)")

    # 2. sluice convert -> from_pretrained.
    llama_folder = os.path.join(work, "llama_500000")
    trained, _, _ = train(binary, work, "trained", llama_folder, data, steps=2, lr=0.01)
    sluice(binary, "convert", trained)  # RUN_DIR/hf from the final checkpoint
    converted = os.path.join(trained, "hf")
    back = transformers.AutoModelForCausalLM.from_pretrained(converted).eval()
    check(type(back).__name__ == "LlamaForCausalLM" and back.config.rope_theta == 500000.0
          if hasattr(back.config, "rope_theta") else type(back).__name__ == "LlamaForCausalLM",
          "from_pretrained loads sluice convert's folder as a Llama with rope_theta 500000")
    check(back.dtype == torch.float32, "converted in the master precision (fp32)")
    rerun, _, _ = train(binary, work, "rerun", converted, data)
    ours, theirs = first_losses(rerun)[0], hf_loss(back, window)
    print(f"        trained llama after 2 steps: sluice {ours:.9f}, from_pretrained {theirs:.9f}, "
          f"difference {abs(ours - theirs):.2e}")
    check(abs(ours - theirs) < LOSS_TOLERANCE, "the converted model computes Sluice's loss")
    check(abs(theirs - loss_500k) > 100 * LOSS_TOLERANCE, "the converted weights are the trained")

    sharded = os.path.join(work, "sharded")
    sluice(binary, "convert", trained, "--out", sharded, "--max-shard-size", "20KB")
    shards = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors"))
    check(len(shards) > 1 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")),
          f"sharded past --max-shard-size: {len(shards)} shards and an index")
    back_sharded = transformers.AutoModelForCausalLM.from_pretrained(sharded).eval()
    check(all(torch.equal(a, b) for a, b in zip(back.state_dict().values(),
                                               back_sharded.state_dict().values())),
          "the sharded folder loads the same weights")

    same, _, _ = train(binary, work, "gpt2_lr0", os.path.join(work, "gpt2"), data, lr=0.0)
    sluice(binary, "convert", same, "--out", os.path.join(work, "gpt2_back"))
    g_back = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, "gpt2_back"))
    original = g.state_dict()
    check(all(torch.equal(original[k], v) for k, v in g_back.state_dict().items()
              if not k.endswith(("attn.bias", "attn.masked_bias"))),
          "GPT-2 with lr 0 converts back bit for bit (Conv1D layouts, tied head)")

    # 3. Refused, never trained as another model.
    biased = os.path.join(work, "llama_biased")
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, vocab_size=VOCAB, attention_bias=True)
    transformers.LlamaForCausalLM(cfg).save_pretrained(biased)
    _, code, out = train(binary, work, "biased", biased, data, expect_ok=False)
    check(code != 0 and "attention_bias" in out, "Llama with q/k/v biases refused naming "
          "attention_bias")
    qwen = os.path.join(work, "qwen2")
    qcfg = transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=VOCAB)
    transformers.Qwen2ForCausalLM(qcfg).save_pretrained(qwen)
    _, code, out = train(binary, work, "qwen", qwen, data, expect_ok=False)
    check(code != 0 and "qwen2" in out, "Qwen2 folder refused naming its model_type")
    # Its weights with a Llama config.json: the biases are tensors the model has no parameter for.
    with open(os.path.join(qwen, "config.json")) as f:
        q = json.load(f)
    q["model_type"] = "llama"
    with open(os.path.join(qwen, "config.json"), "w") as f:
        json.dump(q, f)
    _, code, out = train(binary, work, "qwen_as_llama", qwen, data, expect_ok=False)
    check(code != 0 and "q_proj.bias" in out, "Qwen2 weights as a Llama refused naming q_proj.bias")
    _, code, out = train(binary, work, "mismatch", os.path.join(work, "gpt2"), data,
                         extra_model=", n_head: 2", expect_ok=False)
    check(code != 0 and "model.n_head 2" in out and "n_head 4" in out,
          "a model section that disagrees with config.json refused naming both values")

    if failures:
        print(f"{len(failures)} failed: {failures}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
