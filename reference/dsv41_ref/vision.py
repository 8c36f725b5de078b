"""DeepSeek-V4.1 vision tower and aligner in PyTorch, written from model.md §3.10 (as corrected
from the release's own inference code) and §2 (tensor names).

    patches [n, 3, p, p] → Linear(3·p²→D, bias)
    per block: x += Attn(RMSNorm1(x)); x += SwiGLU(RMSNorm2(x))
        Attn: fused qkv (bias) split q | k | v, 2-D RoPE on q and k, full bidirectional softmax
              (scale 1/√head_dim, no mask), wo (bias)
        SwiGLU: gate, up = chunk(w1 x, 2); w2(silu(gate) · up), no bias
    final RMSNorm → features [n_h, n_w, D]
    aligner: zero-pad the feature grid right/bottom to multiples of 3, F.unfold 3×3 stride 3
             (feature c·9 + kh·3 + kw, tokens row-major), Linear(9D→H, bias), exact GELU,
             Linear(H→H, bias)

2-D RoPE: each head of width hd splits into halves x1, x2 (pairs (i, i + hd/2)); the hd/2 angles
are [row · inv_freq ‖ col · inv_freq] with inv_freq = θ^(−(0, 2, …, hd/2 − 2)/(hd/2)); out =
[x1·cos − x2·sin, x2·cos + x1·sin]. RMSNorm eps 1e-6, in fp32.

Numerics: float32 throughout from the stored (BF16) weights; the release runs the tower in BF16,
so this reference (and the C++ tower checked against it) is the release's function up to BF16
rounding of activations, not bit for bit.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

VISION_EPS = 1e-6


@dataclass
class VisionConfig:
    dim: int = 1024
    n_layers: int = 32
    n_heads: int = 16
    inter: int = 2816
    patch: int = 14
    rope_theta: float = 10000.0
    downsample: int = 3
    out_dim: int = 5120    # the text model's hidden size

    @staticmethod
    def from_config_json(cfg):
        """From a composite config.json dict: vision_config plus text_config.hidden_size."""
        v = cfg["vision_config"]
        return VisionConfig(dim=v["hidden_size"], n_layers=v["num_hidden_layers"], n_heads=v["num_attention_heads"],
                            inter=v["intermediate_size"], patch=v["patch_size"], rope_theta=float(v["rope_theta"]),
                            downsample=v["downsample_ratio"], out_dim=cfg["text_config"]["hidden_size"])


def tensor_shapes(vc):
    """{name: shape} of every vision tensor (model.md §2)."""
    s = {
        "vision.patch_embed.proj.weight": [vc.dim, 3 * vc.patch * vc.patch],
        "vision.patch_embed.proj.bias": [vc.dim],
        "vision.norm.weight": [vc.dim],
        "aligner.w1.weight": [vc.out_dim, vc.dim * vc.downsample ** 2],
        "aligner.w1.bias": [vc.out_dim],
        "aligner.w2.weight": [vc.out_dim, vc.out_dim],
        "aligner.w2.bias": [vc.out_dim],
        "image_start": [vc.out_dim], "image_end": [vc.out_dim], "image_newline": [vc.out_dim],
    }
    for b in range(vc.n_layers):
        p = f"vision.blocks.{b}."
        s.update({p + "norm1.weight": [vc.dim], p + "attn.wqkv.weight": [3 * vc.dim, vc.dim],
                  p + "attn.wqkv.bias": [3 * vc.dim], p + "attn.wo.weight": [vc.dim, vc.dim],
                  p + "attn.wo.bias": [vc.dim], p + "norm2.weight": [vc.dim],
                  p + "mlp.w1.weight": [2 * vc.inter, vc.dim], p + "mlp.w2.weight": [vc.dim, vc.inter]})
    return s


def init_random_vision(vc, generator):
    """Random weights (float32 values, BF16-exact): linear weights ~ N(0, 1/fan_in), biases and
    the start/newline/end vectors ~ N(0, 0.02²), norm weights 1 + N(0, 0.1²)."""
    out = {}
    for name, shape in tensor_shapes(vc).items():
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "vision.norm.weight":
            t = 1 + 0.1 * torch.randn(shape, generator=generator)
        elif name.endswith(".weight"):
            t = torch.randn(shape, generator=generator) / math.sqrt(shape[1])
        else:
            t = 0.02 * torch.randn(shape, generator=generator)
        out[name] = t.to(torch.bfloat16).to(torch.float32)
    return out


def rms_norm(x, w):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + VISION_EPS) * w


def rope_2d(n_h, n_w, head_dim, theta):
    """cos, sin [n_h·n_w, head_dim/2] for patches in row-major grid order."""
    half = head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, half, 2, dtype=torch.float32) / half))
    rows = torch.arange(n_h, dtype=torch.float32).repeat_interleave(n_w)
    cols = torch.arange(n_w, dtype=torch.float32).repeat(n_h)
    angles = torch.cat([rows[:, None] * inv_freq, cols[:, None] * inv_freq], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope_2d(x, cos, sin):
    """x [n, heads, hd]; halves rotated as pairs (i, i + hd/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def vit_forward(w, vc, patches, n_h, n_w, trace=None):
    """patches [n_h·n_w, 3, p, p] → features [n_h·n_w, dim] after the final norm."""
    n = n_h * n_w
    hd = vc.dim // vc.n_heads
    x = patches.reshape(n, -1).float() @ w["vision.patch_embed.proj.weight"].T + w["vision.patch_embed.proj.bias"]
    cos, sin = rope_2d(n_h, n_w, hd, vc.rope_theta)
    for b in range(vc.n_layers):
        p = f"vision.blocks.{b}."
        h = rms_norm(x, w[p + "norm1.weight"])
        qkv = h @ w[p + "attn.wqkv.weight"].T + w[p + "attn.wqkv.bias"]
        q, k, v = (t.reshape(n, vc.n_heads, hd) for t in qkv.split(vc.dim, dim=-1))
        q, k = apply_rope_2d(q, cos, sin), apply_rope_2d(k, cos, sin)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
        o = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v).reshape(n, vc.dim)
        x = x + o @ w[p + "attn.wo.weight"].T + w[p + "attn.wo.bias"]
        h = rms_norm(x, w[p + "norm2.weight"])
        gate, up = (h @ w[p + "mlp.w1.weight"].T).chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ w[p + "mlp.w2.weight"].T
        if trace is not None:
            trace[f"vision.block{b}"] = x.clone()
    return rms_norm(x, w["vision.norm.weight"])


def aligner_forward(w, vc, features, n_h, n_w):
    """features [n_h·n_w, dim] → tokens [⌈n_h/3⌉·⌈n_w/3⌉, out_dim], row-major."""
    d = vc.downsample
    grid = features.reshape(n_h, n_w, vc.dim).permute(2, 0, 1)[None]          # [1, D, n_h, n_w]
    grid = F.pad(grid, (0, (-n_w) % d, 0, (-n_h) % d))                          # right, bottom
    cols = F.unfold(grid, kernel_size=d, stride=d)[0].T                          # [L, D·d²]
    h = F.gelu(cols @ w["aligner.w1.weight"].T + w["aligner.w1.bias"], approximate="none")
    return h @ w["aligner.w2.weight"].T + w["aligner.w2.bias"]


def patches_from_pixels(pixels, patch):
    """pixels [H, W, 3] uint8 (H, W multiples of patch) → normalised BF16-exact patches
    [n_h·n_w, 3, p, p], as the release's load_image: x/255, (x − 0.5)/0.5, BF16."""
    H, W, _ = pixels.shape
    x = pixels.to(torch.float32).permute(2, 0, 1) / 255
    x = ((x - 0.5) / 0.5).to(torch.bfloat16).to(torch.float32)
    n_h, n_w = H // patch, W // patch
    return x.reshape(3, n_h, patch, n_w, patch).permute(1, 3, 0, 2, 4).reshape(n_h * n_w, 3, patch, patch)
