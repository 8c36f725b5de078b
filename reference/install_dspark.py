#!/usr/bin/env python3
"""Add a trained DSpark drafter (train_dspark.py's output folder) to a model directory, and
optionally measure it and write its section of the model card.

  python3 reference/install_dspark.py RUN_DIR models/dsv41-mini \\
      [--eval models/dsv41-mini/heldout/clang-14-doc.txt] [--card models/dsv41-mini/MODEL_CARD.md]

RUN_DIR holds dspark.safetensors, dspark_config.json and summary.json. The shard is copied as
MODEL_DIR/model-dspark.safetensors and listed in model.safetensors.index.json (a directory with a
single model.safetensors gets an index listing both files); the keys go into config.json.
--eval runs eval_dspark.py on the installed model (CPU; RUN_DIR/eval_local.json); --card
replaces (or adds, before "## Known limits") the card's "## DSpark drafter" section from
summary.json and that evaluation.
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHARD = "model-dspark.safetensors"


def install(shard, keys, model_dir):
    """Copies the shard into model_dir as SHARD, lists its tensors in the index and writes the
    drafter keys into config.json."""
    from dsv41_ref.safetensors_io import read_safetensors
    dst = os.path.join(model_dir, SHARD)
    if os.path.abspath(shard) != os.path.abspath(dst):
        shutil.copyfile(shard, dst)
    names = sorted(n for n in read_safetensors(dst))
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            idx = json.load(f)
    elif os.path.exists(single):
        idx = {"metadata": {}, "weight_map": {n: "model.safetensors" for n in read_safetensors(single)}}
    else:
        raise FileNotFoundError(f"{model_dir}: no model.safetensors.index.json or model.safetensors")
    clash = [n for n in names if idx["weight_map"].get(n, SHARD) != SHARD]
    if clash:
        raise ValueError(f"{model_dir}: tensors {clash[:4]} of the drafter shard are already in other files")
    idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if v != SHARD}
    idx["weight_map"].update({n: SHARD for n in names})
    idx["weight_map"] = dict(sorted(idx["weight_map"].items()))
    with open(index, "w", encoding="utf-8") as f:
        json.dump(idx, f, indent=1)
    cpath = os.path.join(model_dir, "config.json")
    with open(cpath, encoding="utf-8") as f:
        raw = json.load(f)
    raw.update(keys)
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)


def _row(name, vals, fmt="{:.3f}"):
    return f"| {name} | " + " | ".join("" if v != v else fmt.format(v) for v in vals) + " |"


def card_section(summary, ev, model_dir, eval_cmd):
    keys = summary["config_keys"]
    a = summary["args"]
    B = keys["dspark_block_size"]
    shard = os.path.getsize(os.path.join(model_dir, SHARD))
    total = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
                if os.path.isfile(os.path.join(model_dir, f)))
    tf, gd = ev["teacher_forced"], ev["greedy_decode"]
    slots = " | ".join(f"slot {k + 1}" for k in range(B))
    lines = [
        "## DSpark drafter",
        "",
        f"`mtp.0`–`mtp.{keys['num_nextn_predict_layers'] - 1}` in `{SHARD}` ({shard:,} bytes; the directory "
        f"{total:,} bytes): {keys['num_nextn_predict_layers']} stages of the backbone's block geometry with "
        f"{keys['dspark_n_routed_experts']} routed experts (top {keys['dspark_num_experts_per_tok']}) + 1 shared, "
        f"target layers {keys['dspark_target_layer_ids']}, block {B}, Markov rank {keys['dspark_markov_rank']}, "
        f"noise id {keys['dspark_noise_token_id']}; stored in the release formats (FP8 E4M3 + 32×32 UE8M0 scales "
        "for the attention projections, shared experts and `main_proj`; FP4 routed experts; BF16 norms, router, "
        "Markov and confidence heads; F32 mHC, sinks, router biases).",
        "",
        "Trained by `reference/train_dspark.py` with the backbone frozen (self-distillation): every position "
        "of a training window is an anchor, the block anchored on the token fed at s+1 as at a decode step; "
        "slot k's target is the frozen backbone's greedy token at s+2+k, counted only where the window's tokens "
        "before it are the backbone's own greedy tokens; windows are corpus text and, for "
        f"{a.get('cont_frac', 0):.0%} of the steps, the backbone's own greedy continuations of corpus prompts "
        f"({summary.get('continuations_generated', 0):,} generated during training, {a.get('gen_prompt', 0)} + "
        f"{a.get('gen_new', 0)} tokens); loss = cross-entropy against the greedy token + "
        f"{a.get('soft_weight', 0)} × cross-entropy against the backbone's distribution, weighted γ^k "
        f"(γ = {a['gamma']}), + {a['conf_weight']} × BCE of the confidence against the conditional acceptance (draft k "
        f"right given drafts < k were: one factor of the prefix survival); from {a.get('qat_from', 2):.0%} of the schedule the forward uses the stored weight formats "
        f"(straight-through). AdamW, lr {a['lr']}, batches of {a['batch']} × {a['seq_len']}"
        + (f", started from the previous drafter" if a.get("init_from") else "") +
        f"; {summary['steps']} steps, {summary['positions'] / 1e6:.1f} M anchor positions in "
        f"{summary['train_seconds']:.0f} s on {summary.get('gpu', summary['device'])} (PyTorch {summary['torch']}).",
        "",
        f"Acceptance under greedy verification on `heldout/{ev['text']}` (never trained on), "
        f"measured by `{eval_cmd}` (the exported weights, fp32 CPU):",
        "",
        f"| | {slots} | mean accepted |",
        "| --- |" + " --- |" * (B + 1),
        _row("teacher forced on the text: P(slots 1…k accepted)", tf["survival_per_slot"] + [tf["mean_accepted"]]),
        _row("— conditional: P(slot k right \\| 1…k−1 right)", tf["conditional_match_per_slot"] + [float("nan")]),
        _row("greedy decoding (the target's own continuation)", gd["survival_per_slot"] + [gd["mean_accepted"]]),
        _row("— conditional", gd["conditional_match_per_slot"] + [float("nan")]),
        "",
        f"Teacher forced: {tf['anchors']:,} anchors ({tf['windows'][0]} windows × {tf['windows'][1]}); greedy: "
        f"{gd['anchors']:,} anchors along {gd['prompts'][0]} continuations of {gd['prompts'][2]} tokens after "
        f"{gd['prompts'][1]}-token prompts. A simulated greedy speculative decode along those continuations "
        f"(each step accepts a drafts and emits a + 1 tokens) makes **{gd['simulated_tokens_per_step']:.2f} tokens "
        "per target step** (1.00 without a drafter).",
        "",
        "Teacher forced, slot k counts the anchors whose slots < k survived and whose slot k's target is known "
        "(the text followed the backbone's greedy path up to it); survival is the product of those conditionals.",
        "",
        "Confidence calibration: sigmoid of confidence k against the observed acceptance of draft k given "
        "drafts < k were accepted (how the engine's planner reads it: π_k = Π σ(c_u)), all slots; expected "
        f"calibration error teacher forced {tf['ece']:.3f}, greedy decoding {gd['ece']:.3f}. The engine "
        "refines it online per slot (runtime/confidence_calibration.h).",
        "",
        "| predicted bucket | teacher forced: drafts | mean predicted | observed | greedy decoding: drafts | mean predicted | observed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    by = {}
    for which, rows in (("tf", tf["calibration"]), ("gd", gd["calibration"])):
        for r in rows:
            by.setdefault(round(r["bucket"][0], 1), {})[which] = r
    for lo in sorted(by):
        cells = []
        for which in ("tf", "gd"):
            r = by[lo].get(which)
            cells += ([f"{r['n']:,}", f"{r['predicted']:.3f}", f"{r['observed']:.3f}"] if r else ["0", "", ""])
        lines.append(f"| {lo:.1f}–{lo + 0.1:.1f} | " + " | ".join(cells) + " |")
    if "simulated_tokens_per_step_by_k" in gd:
        lines += ["", "Simulated greedy speculative decode at fixed K = 1 … " + str(B) + ": " + ", ".join(
            f"{v:.2f}" for v in gd["simulated_tokens_per_step_by_k"]) + " tokens per target step."]
    lines += [""]
    return "\n".join(lines) + "\n"


def write_card(card, section):
    with open(card, encoding="utf-8") as f:
        text = f.read()
    if "## DSpark drafter" in text:
        start = text.index("## DSpark drafter")
        nxt = text.find("\n## ", start + 3)
        text = text[:start] + section + (text[nxt + 1:] if nxt >= 0 else "")
    elif "## Known limits" in text:
        i = text.index("## Known limits")
        text = text[:i] + section + "\n" + text[i:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    text = text.replace("- No DSpark drafter (`mtp.*`) and no vision tower.", "- No vision tower.")
    with open(card, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("model_dir")
    ap.add_argument("--eval", help="held-out text for eval_dspark.py")
    ap.add_argument("--eval-args", default="", help="extra eval_dspark.py arguments")
    ap.add_argument("--card", help="MODEL_CARD.md to write the section into (needs --eval)")
    args = ap.parse_args(argv)
    with open(os.path.join(args.run_dir, "dspark_config.json"), encoding="utf-8") as f:
        keys = json.load(f)
    install(os.path.join(args.run_dir, "dspark.safetensors"), keys, args.model_dir)
    print(f"installed {SHARD} and {len(keys)} config keys into {args.model_dir}")
    if args.eval:
        import eval_dspark
        out = os.path.join(args.run_dir, "eval_local.json")
        cli = ["-m", args.model_dir, args.eval] + args.eval_args.split() + ["--json", out]
        eval_dspark.main(cli)
        if args.card:
            with open(os.path.join(args.run_dir, "summary.json"), encoding="utf-8") as f:
                summary = json.load(f)
            with open(out, encoding="utf-8") as f:
                ev = json.load(f)
            cmd = "python3 reference/eval_dspark.py " + " ".join(c for c in cli[:-2])
            write_card(args.card, card_section(summary, ev, args.model_dir, cmd))
            print(f"wrote the DSpark section of {args.card}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
