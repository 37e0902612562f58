#!/usr/bin/env python3
"""The table of scripts/gpu-side-by-side.sh: Sluice against DeepSpeed, variant by variant.

    python side_by_side_table.py OUT [--warmup 3]

Reads, for each variant V listed in OUT/variants.txt (one name a line), Sluice's run folder
OUT/sluice_V (metrics.jsonl: every step's time; summary.json) and DeepSpeed's record
OUT/ds_V.json (from ds_llama_bench.py), plus OUT/torch.json (plain PyTorch, no ZeRO) where it
exists, and the one-line reasons in OUT/why_V.txt for a side that did not run. Both sides' tokens/s
are those of the median step after the warm-up steps, so the ratio compares like with like.
Writes OUT/side_by_side.md and OUT/side_by_side.json and prints the table.
"""

import argparse
import json
import os
import statistics
import sys

GIB = 1024.0 ** 3


def sluice_side(run_dir, warmup):
    """Median-step tokens/s and friends of a `sluice train` run folder, or None."""
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        return None
    steps = []
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                steps.append(json.loads(line))
    timed = [m for m in steps[warmup:] if m.get("step_time_s")] or [
        m for m in steps if m.get("step_time_s")]
    if not timed:
        return None
    med = statistics.median(m["step_time_s"] for m in timed)
    side = {
        "steps": len(steps),
        "timed_steps": len(timed),
        "median_step_s": med,
        "tokens_per_s": timed[0]["tokens"] / med,
        "peak_device_bytes": max((m.get("peak_bytes") or {}).get("device") or 0 for m in steps),
        "peak_host_bytes": max(((m.get("peak_bytes") or {}).get("host") or 0) +
                               ((m.get("peak_bytes") or {}).get("host_pinned") or 0)
                               for m in steps),
        "loss_first": steps[0].get("loss"),
        "loss_last": steps[-1].get("loss"),
    }
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        side["parameters"] = summary.get("parameters")
        side["summary_tokens_per_s"] = summary.get("tokens_per_s")
        side["precision"] = summary.get("precision")
    return side


def ds_side(path):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_why(out, name):
    path = os.path.join(out, f"why_{name}.txt")
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return " ".join(line.strip() for line in f if line.strip())[:300]


def fmt_rate(x):
    return f"{x:,.0f}" if x else "-"


def fmt_ms(x):
    return f"{x * 1e3:.0f} ms" if x else "-"


def fmt_gib(x):
    return f"{x / GIB:.2f} GiB" if x else "-"


def build(out, warmup):
    with open(os.path.join(out, "variants.txt"), encoding="utf-8") as f:
        variants = [v.strip() for v in f if v.strip()]
    rows = []
    for v in variants:
        sl = sluice_side(os.path.join(out, f"sluice_{v}"), warmup)
        ds = ds_side(os.path.join(out, f"ds_{v}.json"))
        row = {"variant": v, "sluice": sl, "deepspeed": ds,
               "why_sluice": read_why(out, f"sluice_{v}"), "why_ds": read_why(out, f"ds_{v}")}
        if sl and ds and ds.get("tokens_per_s"):
            row["ratio"] = sl["tokens_per_s"] / ds["tokens_per_s"]
        if sl and ds and sl.get("parameters") and ds.get("parameters") and \
                sl["parameters"] != ds["parameters"]:
            row["shape_mismatch"] = f"parameters: Sluice {sl['parameters']:,}, HF {ds['parameters']:,}"
        rows.append(row)
    torch_rec = ds_side(os.path.join(out, "torch.json"))
    return variants, rows, torch_rec


def markdown(rows, torch_rec):
    lines = [
        "| variant | Sluice tokens/s | DeepSpeed tokens/s | Sluice / DeepSpeed | Sluice step | "
        "DeepSpeed step | Sluice device peak | DeepSpeed device peak | DeepSpeed host RSS | "
        "DeepSpeed optimizer | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sl, ds = r["sluice"] or {}, r["deepspeed"] or {}
        notes = []
        if not r["sluice"]:
            notes.append("Sluice: " + (r["why_sluice"] or "no metrics"))
        if not r["deepspeed"]:
            notes.append("DeepSpeed: " + (r["why_ds"] or "no record"))
        if ds.get("ds_op_error"):
            notes.append("DeepSpeed op build failed: " + ds["ds_op_error"][:160])
        if r.get("shape_mismatch"):
            notes.append(r["shape_mismatch"])
        ratio = f"**{r['ratio']:.2f}x**" if r.get("ratio") else "-"
        lines.append(
            f"| {r['variant']} | {fmt_rate(sl.get('tokens_per_s'))} | "
            f"{fmt_rate(ds.get('tokens_per_s'))} | {ratio} | {fmt_ms(sl.get('median_step_s'))} | "
            f"{fmt_ms(ds.get('median_step_s'))} | {fmt_gib(sl.get('peak_device_bytes'))} | "
            f"{fmt_gib(ds.get('peak_device_bytes'))} | {fmt_gib(ds.get('host_rss_peak_bytes'))} | "
            f"{ds.get('optimizer') or '-'} | {'; '.join(notes).replace('|', '/')} |")
    if torch_rec:
        lines.append(
            f"| pytorch (no ZeRO) | - | {fmt_rate(torch_rec.get('tokens_per_s'))} (plain PyTorch) | "
            f"- | - | {fmt_ms(torch_rec.get('median_step_s'))} | - | "
            f"{fmt_gib(torch_rec.get('peak_device_bytes'))} | "
            f"{fmt_gib(torch_rec.get('host_rss_peak_bytes'))} | {torch_rec.get('optimizer')} | "
            "autocast bf16 |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    variants, rows, torch_rec = build(args.out, args.warmup)
    any_ds = next((r["deepspeed"] for r in rows if r["deepspeed"]), torch_rec) or {}
    machine = any_ds.get("machine", {})
    header = [
        "# Sluice and DeepSpeed ZeRO-3 side by side (scripts/gpu-side-by-side.sh)",
        "",
        f"GPU: {machine.get('gpu', '?')} (driver {machine.get('driver', '?')}), host CPU: "
        f"{machine.get('cpu', '?')} x {machine.get('cpu_count', '?')}; torch "
        f"{machine.get('torch', '?')} (CUDA {machine.get('torch_cuda', '?')}), transformers "
        f"{machine.get('transformers', '?')}, DeepSpeed "
        f"{(any_ds.get('versions') or {}).get('deepspeed', '?')}.",
        "tokens/s: the median step after the first "
        f"{args.warmup} steps on both sides; device peak: Sluice's device tier, "
        "torch.cuda.max_memory_allocated for DeepSpeed.",
        "",
    ]
    shape = any_ds.get("shape")
    if shape:
        header.insert(4, "Shape: L{n_layer} d_model {d_model} heads {n_head}/{n_kv_head} d_ff {d_ff} "
                         "vocab {vocab_size}, micro-batch {micro_batch} x seq {seq_len}, "
                         "accumulation {grad_accum}; bf16 {bf16}.".format(**shape))
    text = "\n".join(header) + markdown(rows, torch_rec)
    with open(os.path.join(args.out, "side_by_side.md"), "w", encoding="utf-8") as f:
        f.write(text)
    record = {"schema": "sluice.side_by_side", "version": 1, "warmup": args.warmup,
              "machine": machine, "variants": variants, "rows": rows, "pytorch": torch_rec}
    with open(os.path.join(args.out, "side_by_side.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
