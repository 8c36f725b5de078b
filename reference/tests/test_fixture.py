"""The repository's own fixture, tests/fixtures/v41-micro (make_fixture.py), is what this
reference computes now: its stored logits and greedy continuations are recomputed from its
weights. Needs nothing outside the repository. The C++ side is tests/fixture_forward_test.cpp,
with the same bounds (that file says why they hold)."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from dsv41_ref import load_model                                   # noqa: E402
from dsv41_ref.safetensors_io import read_safetensors              # noqa: E402
import make_fixture                                                # noqa: E402

FIXTURE = make_fixture.DEFAULT_OUT


def test_fixture_is_small_and_complete():
    names = sorted(os.listdir(FIXTURE))
    assert names == ["config.json", "golden.safetensors", "model.safetensors", "tokenizer.json"]
    assert sum(os.path.getsize(os.path.join(FIXTURE, n)) for n in names) < 512 * 1024


def test_fixture_outputs_are_what_the_reference_computes():
    model = load_model(FIXTURE)
    ref = {k: torch.from_numpy(v[1]) for k, v in read_safetensors(os.path.join(FIXTURE, "golden.safetensors")).items()}
    assert len(make_fixture.PROMPTS) == 2
    for s in range(len(make_fixture.PROMPTS)):
        ids = ref[f"s{s}.input_ids"].tolist()
        with torch.no_grad():
            got = model(torch.tensor(ids))
        want = ref[f"s{s}.logits"]
        scale = want.abs().max()
        rows = (got - want).abs().amax(-1) / scale
        assert float(rows.median()) <= 1e-4 and float(rows.max()) <= 2e-2, (s, rows)
        generated, _ = make_fixture.greedy(model, ids)
        assert generated == ref[f"s{s}.generated"].tolist()
