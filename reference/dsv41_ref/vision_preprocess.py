"""Image preprocessing of the release (model.md §3.10 "Preprocessing"), transcribed from the
spec's description of its `plan_image_grid` / `safe_resize` / `solve_resize_ratio` /
`load_image`. Needs Pillow (Debian python3-pil) only for `load_patches`: the resize *is*
Pillow's `ImageOps.pad`, which the C++ side (src/model/vision/pillow_resize.h) reimplements.
"""
import math

import numpy as np
import torch


def _llm_grid(best_h, best_w, p, d):
    return math.ceil((best_h // p) / d), math.ceil((best_w // p) / d)


def _span(n_h, n_w):
    return n_h * (n_w + 1) + 2


def _solve_resize_ratio(height, width, p, d, max_tokens):
    r = height / width
    max_w = math.sqrt((max_tokens - 2) / r + 0.25) - 0.5
    max_h = max_w * r
    cell = p * d
    if max_w < 1.0:
        return (max_tokens - 2) // 2 * cell, cell
    if max_h < 1.0:
        return cell, (max_tokens - 3) * cell
    beta = min(math.floor(max_w) * cell / width, math.floor(max_h) * cell / height)
    return math.floor(height * beta / p) * p, math.floor(width * beta / p) * p


def plan_image_grid(width, height, vc):
    """vc: a vision_config dict. Returns (best_w, best_h, n_llm_h, n_llm_w)."""
    p, d, t = vc["patch_size"], vc["downsample_ratio"], vc["max_image_tokens"]
    ratio_cap = vc.get("max_wh_ratio")
    if ratio_cap is not None and width > height * ratio_cap:
        width = height * ratio_cap
    if 0 < width * height < vc["min_pixels"]:
        ratio = (vc["min_pixels"] / (width * height)) ** 0.5
        width, height = int(width * ratio), int(height * ratio)
    best_w, best_h = math.ceil(width / p) * p, math.ceil(height / p) * p
    n_h, n_w = _llm_grid(best_h, best_w, p, d)
    if _span(n_h, n_w) > t:
        best_h, best_w = _solve_resize_ratio(height, width, p, d, t)
        n_h, n_w = _llm_grid(best_h, best_w, p, d)
    return best_w, best_h, n_h, n_w


def load_patches(path, vc):
    """The file → normalised BF16-exact patches [n, 3, p, p] (float32 tensor), and the grid."""
    from PIL import Image, ImageOps
    p = vc["patch_size"]
    with Image.open(path) as source:
        image = source.convert("RGB")
    best_w, best_h, n_h, n_w = plan_image_grid(image.width, image.height, vc)
    ratio_cap = vc.get("max_wh_ratio")
    if ratio_cap is not None and image.width >= ratio_cap * image.height:
        image = image.resize((best_w, best_h))
    else:
        image = ImageOps.pad(image, (best_w, best_h), color=(127, 127, 127))
    x = torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1) / 255
    x = ((x - 0.5) / 0.5).to(torch.bfloat16).to(torch.float32)
    patches = x.reshape(3, best_h // p, p, best_w // p, p).permute(1, 3, 0, 2, 4).reshape(-1, 3, p, p)
    return patches, (best_w, best_h, n_h, n_w)
