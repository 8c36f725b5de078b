"""The DSpark drafter (dsv41_ref/dspark.py): its training path against its eval path, chunked
prefill against one prefill, batches against single sequences, the stored weight formats, the
committed fixture tests/fixtures/dspark-micro (recomputed byte for byte), and the C++ drafter
through `dsv41 logits --dump dspark` (skipped, naming why, while the binary lacks it)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from dsv41_ref.config import config_from_dict                       # noqa: E402
from dsv41_ref.dspark import (DSpark, dspark_config, drafter_tensors, load_drafter,  # noqa: E402
                              load_with_drafter, prefill_and_draft, stored_format)
from dsv41_ref.init import init_random                              # noqa: E402
from dsv41_ref.quant import e2m1_round, e4m3_round                  # noqa: E402
from dsv41_ref.safetensors_io import (dequantise_state, quantise_fp4_rows, quantise_fp8_block,  # noqa: E402
                                      read_safetensors, write_safetensors)
import make_dspark_fixture                                          # noqa: E402

FIXTURE = make_dspark_fixture.DEFAULT_OUT
BINARY = os.environ.get("DSV41_BINARY", os.path.join(REPO, "build", "dsv41"))


@pytest.fixture(scope="module")
def micro():
    return load_with_drafter(FIXTURE)


def rel(got, want):
    """max |Δ| over the RMS of the wanted values."""
    return float((got - want).abs().max() / want.pow(2).mean().sqrt().clamp(min=1e-30))


def eval_drafts(model, drafter, ids):
    """Greedy anchors of the target on ids [N, L] and, for every s, the eval-path draft after
    pushing positions 0 … s one at a time → (anchors [N, L], ids [N, L, B], logits, conf)."""
    with torch.no_grad():
        logits, feats = model(ids, capture_layers=drafter.dc.target_layers)
        anchors = logits.argmax(-1)
        state = drafter.new_state()
        outs = []
        for s in range(ids.shape[1]):
            drafter.push(state, feats[:, s:s + 1])
            outs.append(drafter.draft(state, anchors[:, s], model.embed.weight, model.head.weight))
    return feats, anchors, *[torch.stack([o[k] for o in outs], 1) for k in range(3)]


@pytest.mark.parametrize("train_mode", [False, True])
def test_training_path_computes_the_eval_drafts(micro, train_mode):
    """Every anchor of two 14-token windows (W = 4: the rings fill, then slide) at once, the
    Markov inputs teacher-forced to the eval path's own choices; train_mode also runs the dense
    MoE with gradients on."""
    model, drafter = micro
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.cfg.vocab_size, (2, 14), generator=gen)
    feats, anchors, e_ids, e_logits, e_conf = eval_drafts(model, drafter, ids)
    prev = torch.cat([anchors[..., None], e_ids[..., :-1]], -1)
    drafter.train(train_mode)
    try:
        with torch.set_grad_enabled(train_mode):
            _, t_ids, t_logits, t_conf = drafter.forward_train(feats, anchors, prev, model.embed.weight,
                                                               model.head.weight)
    finally:
        drafter.eval()
    assert torch.equal(t_ids, e_ids)
    assert rel(t_logits.detach(), e_logits) <= 1e-4
    assert rel(t_conf.detach(), e_conf) <= 1e-4
    # a sub-range of anchors gives the same rows
    with torch.no_grad():
        _, _, part, _ = drafter.forward_train(feats, anchors[:, 6:11], prev[:, 6:11], model.embed.weight,
                                              model.head.weight, first=6)
    assert rel(part, e_logits[:, 6:11]) <= 1e-4


def test_draft_after_chunked_prefill_equals_one_prefill(micro):
    model, drafter = micro
    ids = torch.randint(3, model.cfg.vocab_size, (17,), generator=torch.Generator().manual_seed(1))
    one = prefill_and_draft(model, drafter, ids)
    for chunks in ([5, 4, 8], [1] * 17, [16, 1]):
        got = prefill_and_draft(model, drafter, ids, chunks)
        assert got[0] == one[0] and torch.equal(got[1], one[1]), chunks
        assert rel(got[2], one[2]) <= 1e-4 and rel(got[3], one[3]) <= 1e-4, chunks


def test_batch_of_sequences_equals_one_at_a_time(micro):
    model, drafter = micro
    ids = torch.randint(3, model.cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(2))
    _, _, b_ids, b_logits, b_conf = eval_drafts(model, drafter, ids)
    for n in range(3):
        _, _, o_ids, o_logits, o_conf = eval_drafts(model, drafter, ids[n:n + 1])
        assert torch.equal(b_ids[n], o_ids[0])
        assert rel(b_logits[n], o_logits[0]) <= 1e-4 and rel(b_conf[n], o_conf[0]) <= 1e-4


def test_draft_depends_on_what_it_should(micro):
    """Not a constant function: the anchor, the ring (older context within W) and the noise id
    each change the draft; context older than W does not enter the rings."""
    model, drafter = micro
    W = model.cfg.sliding_window
    ids = torch.randint(3, model.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, feats = model(ids, capture_layers=drafter.dc.target_layers)

        def draft(f, anchor):
            st = drafter.new_state()
            drafter.push(st, f)
            return drafter.draft(st, torch.tensor([anchor]), model.embed.weight, model.head.weight)

        base = draft(feats, 5)
        assert rel(draft(feats, 6)[1], base[1]) > 1e-2
        changed = feats.clone()
        changed[:, -2] += 1.0                       # inside the ring
        assert rel(draft(changed, 5)[1], base[1]) > 1e-3
        old = feats.clone()
        old[:, :12 - W] = torch.randn(old[:, :12 - W].shape)   # older than the ring
        assert torch.equal(draft(old, 5)[1], base[1])
        noise = drafter.dc.noise_id
        try:
            drafter.dc.noise_id = (noise + 1) % model.cfg.vocab_size
            assert rel(draft(feats, 5)[1], base[1]) > 1e-3
        finally:
            drafter.dc.noise_id = noise


def test_training_loss_gives_gradients_to_every_trained_tensor(micro):
    model, drafter = micro
    ids = torch.randint(3, model.cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits, feats = model(ids, capture_layers=drafter.dc.target_layers)
    g = logits.argmax(-1)
    A = 10 - drafter.dc.block
    prev = torch.stack([g[:, s:s + drafter.dc.block] for s in range(A)], 1)
    target = torch.stack([g[:, s + 1:s + 1 + drafter.dc.block] for s in range(A)], 1)
    drafter.train()
    try:
        _, _, lg, conf = drafter.forward_train(feats, g[:, :A], prev, model.embed.weight, model.head.weight)
        loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), target.reshape(-1)) + conf.pow(2).mean()
        loss.backward()
    finally:
        drafter.eval()
    for n, p in drafter.named_parameters():
        if n.endswith(("gate.bias", "gate.bias_vl")):
            continue   # selection-only biases: no gradient by design
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, n
    drafter.zero_grad(set_to_none=True)


def test_config_errors_name_the_key():
    raw = json.load(open(os.path.join(FIXTURE, "config.json")))
    for key, value, words in [("num_nextn_predict_layers", 0, "num_nextn_predict_layers"),
                              ("dspark_target_layer_ids", [9], "dspark_target_layer_ids"),
                              ("dspark_noise_token_id", 10 ** 6, "dspark_noise_token_id"),
                              ("dspark_num_experts_per_tok", 9, "dspark_num_experts_per_tok")]:
        bad = dict(raw, **{key: value})
        with pytest.raises(ValueError, match=words):
            dspark_config(config_from_dict(bad))


def test_stored_formats_round_trip():
    gen = torch.Generator().manual_seed(5)
    for rows, cols in [(16, 48), (64, 16), (40, 72), (33, 32)]:
        w = torch.randn(rows, cols, generator=gen) * torch.exp(torch.randn(rows, 1, generator=gen))
        w[0, :5] = 0
        codes, scale = quantise_fp8_block(w.numpy())
        assert codes.shape == (rows, cols) and scale.shape == (-(-rows // 32), -(-cols // 32))
        deq = dequantise_state({"a.weight": ("F8_E4M3", codes), "a.scale": ("F8_E8M0", scale)})["a.weight"]
        # independent: per 32×32 block, the power of two that brings amax to ≤ 448
        for bi in range(scale.shape[0]):
            for bj in range(scale.shape[1]):
                blk = w[bi * 32:(bi + 1) * 32, bj * 32:(bj + 1) * 32]
                s = 2.0 ** (int(scale[bi, bj]) - 127)
                assert blk.abs().max() / s <= 448 and blk.abs().max() / s > 224
                want = e4m3_round(blk / s) * s
                assert torch.equal(deq[bi * 32:(bi + 1) * 32, bj * 32:(bj + 1) * 32], want)
        if cols % 2 == 0:
            packed, s4 = quantise_fp4_rows(w.numpy())
            assert packed.dtype == np.int8 and packed.shape == (rows, cols // 2) and s4.shape == (rows, -(-cols // 32))
            deq = dequantise_state({"b.weight": ("I8", packed), "b.scale": ("F8_E8M0", s4)})["b.weight"]
            for j in range(s4.shape[1]):
                blk = w[:, j * 32:(j + 1) * 32]
                s = torch.tensor(2.0) ** (torch.from_numpy(s4[:, j].astype(np.float32)) - 127)
                assert torch.all(blk.abs().amax(1) / s <= 6)
                assert torch.equal(deq[:, j * 32:(j + 1) * 32], e2m1_round(blk / s[:, None]) * s[:, None])


def test_fixture_is_small_and_in_the_release_formats():
    names = sorted(os.listdir(FIXTURE))
    assert names == ["config.json", "golden.safetensors", "model.safetensors", "tokenizer.json"]
    assert sum(os.path.getsize(os.path.join(FIXTURE, n)) for n in names) <= 400 * 1024
    raw = read_safetensors(os.path.join(FIXTURE, "model.safetensors"))
    mtp = {k: v[0] for k, v in raw.items() if k.startswith("mtp.")}
    assert mtp["mtp.0.attn.wq_b.weight"] == "F8_E4M3" and mtp["mtp.0.attn.wq_b.scale"] == "F8_E8M0"
    assert mtp["mtp.0.main_proj.weight"] == "F8_E4M3" and mtp["mtp.1.ffn.shared_experts.w2.weight"] == "F8_E4M3"
    assert mtp["mtp.2.ffn.experts.3.w2.weight"] == "I8" and mtp["mtp.2.ffn.experts.3.w2.scale"] == "F8_E8M0"
    assert mtp["mtp.2.markov_head.embed.weight"] == "BF16" and mtp["mtp.2.confidence_head.proj.weight"] == "BF16"
    assert mtp["mtp.0.hc_attn_fn"] == "F32" and mtp["mtp.1.attn.attn_sink"] == "F32"
    assert mtp["mtp.0.ffn.gate.bias"] == "F32"
    for k, dt in mtp.items():
        if k.endswith(".weight"):
            want = {"FP8": "F8_E4M3", "FP4": "I8"}.get(stored_format(k), stored_format(k))
            assert dt == want, k


def test_fixture_recomputes_byte_for_byte(tmp_path):
    make_dspark_fixture.main(str(tmp_path))
    for n in sorted(os.listdir(FIXTURE)):
        assert (tmp_path / n).read_bytes() == open(os.path.join(FIXTURE, n), "rb").read(), n


def test_hf_naming_and_f32_storage_load_the_same_drafter(micro, tmp_path):
    _, drafter = micro
    for naming, formats in [("hf", "F32"), ("release", "BF16")]:
        d = tmp_path / f"{naming}-{formats}"
        d.mkdir()
        for n in ("config.json", "tokenizer.json"):
            (d / n).write_bytes(open(os.path.join(FIXTURE, n), "rb").read())
        write_safetensors(str(d / "model.safetensors"), drafter_tensors(drafter, naming, formats))
        got = load_drafter(str(d)).state_dict()
        for k, v in drafter.state_dict().items():
            # (the fixture's FP8 / FP4 values are exact in BF16: 3 or 1 mantissa bits)
            want = v if formats == "F32" else v.to(torch.bfloat16).float()
            assert torch.equal(got[k], want), k
            if stored_format(k) in ("FP8", "FP4"):
                assert torch.equal(got[k], v), k


def test_missing_drafter_tensor_is_named(micro, tmp_path):
    _, drafter = micro
    for n in ("config.json", "tokenizer.json"):
        (tmp_path / n).write_bytes(open(os.path.join(FIXTURE, n), "rb").read())
    t = drafter_tensors(drafter, "release", "F32")
    del t["mtp.1.attn.wkv.weight"]
    write_safetensors(str(tmp_path / "model.safetensors"), t)
    with pytest.raises(ValueError, match="mtp.1.attn.wkv.weight"):
        load_drafter(str(tmp_path))


def test_fixture_golden_is_what_the_reference_drafts(micro):
    model, drafter = micro
    ref = {k: torch.from_numpy(v[1]) for k, v in read_safetensors(os.path.join(FIXTURE, "golden.safetensors")).items()}
    n = len(make_dspark_fixture.LENGTHS)
    for i in range(n):
        ids = ref[f"dspark{i}.input_ids"]
        assert len(ids) == make_dspark_fixture.LENGTHS[i]
        anchor, d_ids, d_logits, conf = prefill_and_draft(model, drafter, ids)
        assert anchor == int(ref[f"dspark{i}.anchor"][0])
        assert torch.equal(d_ids.int(), ref[f"dspark{i}.draft_ids"])
        assert torch.equal(d_logits, ref[f"dspark{i}.draft_logits"])
        assert torch.equal(conf, ref[f"dspark{i}.confidence"])


def _binary_has_dspark_dump():
    if not os.path.exists(BINARY):
        return False, f"{BINARY} is not built"
    r = subprocess.run([BINARY, "logits", "--help"], capture_output=True, text=True)
    if "dspark" not in r.stdout + r.stderr:
        return False, f"{BINARY} logits has no --dump dspark yet"
    return True, ""


def test_cpp_drafter_matches_the_fixture(tmp_path):
    ok, why = _binary_has_dspark_dump()
    if not ok:
        pytest.skip(why)
    ref = {k: torch.from_numpy(v[1]) for k, v in read_safetensors(os.path.join(FIXTURE, "golden.safetensors")).items()}
    for i in range(len(make_dspark_fixture.LENGTHS)):
        ids = ref[f"dspark{i}.input_ids"].tolist()
        out = tmp_path / f"d{i}.safetensors"
        r = subprocess.run([BINARY, "logits", "-m", FIXTURE, "--ids", ",".join(map(str, ids)),
                            "--out", str(tmp_path / "l.safetensors"), "--dump", "dspark", "--dump-out", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = {k: torch.from_numpy(v[1]) for k, v in read_safetensors(str(out)).items()}
        assert got["dspark.draft_ids"].tolist() == ref[f"dspark{i}.draft_ids"].tolist(), i
        assert tuple(got["dspark.draft_logits"].shape) == tuple(ref[f"dspark{i}.draft_logits"].shape)
        assert rel(got["dspark.draft_logits"].float(), ref[f"dspark{i}.draft_logits"]) <= 1e-4, i
        assert rel(got["dspark.confidence"].float(), ref[f"dspark{i}.confidence"]) <= 1e-4, i


# ---- acceptance measurement and the trainer ------------------------------------------------

import eval_dspark                                                  # noqa: E402
import install_dspark                                               # noqa: E402
import train_dspark                                                 # noqa: E402


def test_slot_inputs_and_accepted_lengths():
    x = torch.arange(10)[None] + 100                                # the window's tokens
    g = x[:, 1:].clone()                                            # the target predicts the text …
    g = torch.cat([g, torch.tensor([[200]])], 1)
    g[0, 4] = 7                                                     # … except at position 4 (x[5] = 105)
    anchor, prev, target, valid = eval_dspark.slot_inputs(x, g, 3)
    assert anchor.tolist() == [[101 + s for s in range(7)]]        # anchor s = the token fed at s+1
    assert prev[0, 2].tolist() == [103, 104, 105] and target[0, 2].tolist() == [104, 7, 106]
    # slot k is valid while the text kept to the target's greedy path after s+1
    assert valid[0, 0].tolist() == [True, True, True]
    assert valid[0, 2].tolist() == [True, True, False]              # x[5] = 105 is not g[4] = 7
    assert valid[0, 3].tolist() == [True, False, False]            # slot 1 of anchor 3 follows x[5], not g[4]
    assert valid[0, 4].tolist() == [True, True, True]
    assert valid[0, 1].tolist() == [True, True, True] and valid[0, 0, 2]
    ids = target.clone()
    ids[0, 0, 1] = 0                                                # anchor 0: slot 2 wrong
    ids[0, 1, 0] = 0                                                # anchor 1: slot 1 wrong, slot 2 right
    surv, length, known = eval_dspark.accepted(ids, target)
    assert length[0, :3].tolist() == [1, 0, 3] and bool(known.all())
    assert surv[0, 1].tolist() == [False, False, False]
    # with validity: an invalid slot is known only when an earlier valid slot failed
    ids = target.clone()
    _, _, known = eval_dspark.accepted(ids, target, valid)
    assert known[0, 2].tolist() == [True, True, False]
    ids[0, 2, 0] = 0
    _, _, known = eval_dspark.accepted(ids, target, valid)
    assert known[0, 2].tolist() == [True, True, True]


def test_teacher_forced_acceptance_equals_sequential_drafts(micro):
    """The measurement's premise: along the target's own greedy continuation (every slot valid),
    with Markov inputs forced to the target's tokens, the accepted length at each anchor is that
    of the real (sequential) draft."""
    model, drafter = micro
    P = 5
    prompt = torch.randint(3, model.cfg.vocab_size, (2, P), generator=torch.Generator().manual_seed(6))
    ids, _ = eval_dspark.greedy_continuations(model, prompt, 10)
    _, g, e_ids, _, _ = eval_drafts(model, drafter, ids)
    assert torch.equal(g[:, P - 1:-1], ids[:, P:])                 # one pass = the incremental decode
    B = drafter.dc.block
    A = ids.shape[1] - B
    anchor, _, target, valid = eval_dspark.slot_inputs(ids, g, B)
    assert bool(valid[:, P - 1:].all())
    # eval_drafts' draft at s anchors on g[s] = ids[s+1]: slot_inputs' anchor s
    assert torch.equal(anchor[:, P - 1:], g[:, P - 1:A])
    _, want, _ = eval_dspark.accepted(e_ids[:, P - 1:A], target[:, P - 1:])
    surv, conf, known = eval_dspark.drafts_on(model, drafter, ids, first=P - 1, batch=1)
    assert torch.equal(surv.sum(-1), want) and bool(known.all())
    # random weights rarely match: make the targets agree with anchor s's sequential draft for
    # exactly k slots and check the measured length is k
    V = model.cfg.vocab_size
    for s, k in [(0, 5), (3, 2), (5, 0), (4, 4), (2, 1)]:
        forced = target[:, P - 1:].clone()
        forced[:, s, :k] = e_ids[:, P - 1 + s, :k]
        if k < B:
            forced[:, s, k] = (e_ids[:, P - 1 + s, k] + 1) % V
        _, length, _ = eval_dspark.accepted(e_ids[:, P - 1:A], forced)
        assert length[:, s].tolist() == [k, k], (s, k)


def test_stored_params_are_the_exported_weights(micro):
    """Quantisation-aware training: the forward with stored_params sees exactly the weights that
    drafter_tensors writes and load_drafter reads back."""
    _, drafter = micro
    want = dequantise_state(drafter_tensors(drafter))
    got = train_dspark.stored_params(drafter)
    for k, v in got.items():
        assert torch.equal(v.detach(), want[k]), k


def _tiny_data(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(3, 300, size=40)
    seq = np.concatenate([base] * 200).astype(np.uint16)            # a repeating text: learnable fast
    d = tmp_path / "data"
    d.mkdir()
    import lzma
    (d / "train.u16.xz").write_bytes(lzma.compress(seq.tobytes()))
    return d


def test_trainer_learns_installs_and_measures(tmp_path, capsys):
    backbone = tmp_path / "backbone"
    backbone.mkdir()
    src = make_dspark_fixture.BACKBONE
    for n in ("config.json", "tokenizer.json", "model.safetensors"):
        (backbone / n).write_bytes(open(os.path.join(src, n), "rb").read())
    out = tmp_path / "run"
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("The model reads a line of text and predicts the next token. " * 6)
    args = ["--model", str(backbone), "--data", str(_tiny_data(tmp_path)), "--out", str(out), "--device", "cpu",
            "--steps", "30", "--batch", "2", "--seq-len", "24", "--lr", "1e-2", "--log-every", "1",
            "--stages", "2", "--target-layers", "4,5", "--experts", "4", "--top-k", "2", "--markov-rank", "8",
            "--eval-text", str(heldout), "--eval-args", "--windows 2 --seq-len 20 --prompts 2 --prompt-len 8 --new 8",
            "--install", str(backbone)]
    assert train_dspark.main(args) == 0
    log = [json.loads(l) for l in open(out / "log.jsonl")]
    ce = [r["ce"] for r in log]
    assert len(ce) == 30 and all(np.isfinite(ce))
    assert np.mean(ce[-5:]) < 0.9 * np.mean(ce[:5])
    summary = json.load(open(out / "summary.json"))
    tf = summary["eval"]["teacher_forced"]
    assert tf["anchors"] == 2 * (20 - 5)
    assert sum(r["n"] for r in tf["calibration"]) <= tf["anchors"] * 5
    assert all(0 <= v <= 1 for v in tf["survival_per_slot"])
    # installed: an index listing both files, the keys in config.json, the drafter loads and is
    # the trained weights in the stored formats
    idx = json.load(open(backbone / "model.safetensors.index.json"))["weight_map"]
    assert idx["mtp.1.markov_head.head.weight"] == install_dspark.SHARD and idx["embed.weight"] == "model.safetensors"
    cfg = json.load(open(backbone / "config.json"))
    assert cfg["num_nextn_predict_layers"] == 2 and cfg["dspark_target_layer_ids"] == [4, 5]
    model, drafter = load_with_drafter(str(backbone))
    trained = DSpark(model.cfg)
    trained.load_state_dict(torch.load(out / "train_state.pt")["drafter"])
    want = dequantise_state(drafter_tensors(trained))
    for k, v in drafter.state_dict().items():
        assert torch.equal(v, want[k]), k
    capsys.readouterr()
