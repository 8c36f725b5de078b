"""The C++ image path (`dsv41 vision`: libpng / libjpeg-turbo decoding, the resize plan, the
reimplemented Pillow bicubic `ImageOps.pad`, normalisation, patch layout) against the release's
own path run here with Pillow: identical patches, bit for bit, on images of many sizes (upscale,
downscale, padding on either axis, extreme aspect ratios) and modes (RGB, L, LA, RGBA, P, 16-bit
grey PNG; baseline, progressive and greyscale JPEG). Skipped without Pillow (Debian python3-pil)
or without the built binary."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from dsv41_ref.safetensors_io import read_safetensors        # noqa: E402
from dsv41_ref.vision_preprocess import load_patches         # noqa: E402

PIL = pytest.importorskip("PIL")
from PIL import Image                                        # noqa: E402

BINARY = os.environ.get("DSV41_BINARY", os.path.join(REPO, "build", "dsv41"))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "vision-micro")
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason=f"{BINARY} is not built")

SIZES = [(100, 37), (37, 100), (300, 200), (1000, 17), (17, 1000), (513, 511), (29, 43), (7, 5), (2000, 1500)]


def _images(tmp_path):
    rng = np.random.default_rng(0)
    for w, h in SIZES:
        y, x = np.mgrid[0:h, 0:w]
        smooth = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1), (x + y) * 3 % 256], -1).astype(np.uint8)
        noise = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        alpha = rng.integers(0, 256, (h, w, 1), dtype=np.uint8)
        files = {
            "rgb.png": Image.fromarray(noise), "smooth.png": Image.fromarray(smooth),
            "L.png": Image.fromarray(noise[..., 0]), "LA.png": Image.fromarray(np.concatenate([noise[..., :1], alpha], -1), "LA"),
            "RGBA.png": Image.fromarray(np.concatenate([noise, alpha], -1), "RGBA"),
            "P.png": Image.fromarray(smooth).convert("P", palette=Image.ADAPTIVE, colors=50),
            "I16.png": Image.fromarray(noise[..., 0].astype(np.uint16) * 257, "I;16"),
        }
        for name, im in files.items():
            path = tmp_path / f"{w}x{h}_{name}"
            im.save(path)
            yield path
        for name, kw in {"q75.jpg": {"quality": 75}, "prog.jpg": {"quality": 85, "progressive": True}}.items():
            path = tmp_path / f"{w}x{h}_{name}"
            Image.fromarray(smooth if name == "q75.jpg" else noise).save(path, **kw)
            yield path
        path = tmp_path / f"{w}x{h}_grey.jpg"
        Image.fromarray(smooth[..., 1]).save(path, quality=90)
        yield path


def test_patches_are_pillows_bit_for_bit(tmp_path):
    with open(os.path.join(FIXTURE, "config.json")) as f:
        vc = json.load(f)["vision_config"]
    checked = 0
    for path in _images(tmp_path):
        want, _ = load_patches(path, vc)
        out = tmp_path / "dump.safetensors"
        r = subprocess.run([BINARY, "vision", "-m", FIXTURE, "--image", str(path), "--dump-out", str(out),
                            "--threads", "1"], capture_output=True, text=True)
        assert r.returncode == 0, (path, r.stderr)
        got = torch.from_numpy(read_safetensors(str(out))["vision.patches"][1].copy())
        assert got.shape == want.shape, (path, got.shape, want.shape)
        assert torch.equal(got, want), (path, int((got != want).sum()))
        checked += 1
    assert checked == len(SIZES) * 10


def test_release_plan_numbers_too(tmp_path):
    """The release's min_pixels (544²) and 1024-token span: small images are upscaled first, big
    ones shrunk to fit. The fixture's weights with the release's preprocessing numbers."""
    import shutil
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(os.path.join(FIXTURE, "model.safetensors"), model / "model.safetensors")
    with open(os.path.join(FIXTURE, "config.json")) as f:
        cfg = json.load(f)
    cfg["vision_config"].update({"min_pixels": 295936, "max_image_tokens": 1024})
    (model / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(1)
    for w, h in [(7, 5), (300, 200), (2000, 1500), (5000, 40)]:
        path = tmp_path / f"{w}x{h}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        want, grid = load_patches(path, cfg["vision_config"])
        out = tmp_path / "dump.safetensors"
        r = subprocess.run([BINARY, "vision", "-m", str(model), "--image", str(path), "--dump-out", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, (path, r.stderr)
        assert f"-> {grid[0]}x{grid[1]} pixels" in r.stdout, (r.stdout, grid)
        got = torch.from_numpy(read_safetensors(str(out))["vision.patches"][1].copy())
        assert torch.equal(got, want), (path, int((got != want).sum()))
