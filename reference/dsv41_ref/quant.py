"""Cache fake-quantisers with straight-through gradients (model.md §4).

Each `*_qdq(x)` rounds onto the format's grid and returns float values; the forward value is the
quantised one, the gradient is the identity (x + (q(x) − x).detach()), so the model trains with
the caches' rounding always on (QAT).  All arithmetic is float32 and exact where the spec says so
(power-of-two scales; round-half-even via torch.round).
"""
import torch


def _ste(x, q):
    return x + (q - x).detach()


def _pow2_ceil_log2(y):
    """2^ceil(log2(y)) for y > 0, from the float bits: frexp gives y = m·2^e with m in [0.5, 1);
    y is an exact power of two iff m == 0.5 (then the result is y itself)."""
    m, e = torch.frexp(y)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(y), e)


def e4m3_round(v):
    """Round float32 `v` (already within ±448) to the nearest F8_E4M3 value, ties to even.
    Normal numbers have 3 mantissa bits; below 2^-6 the step is the subnormal 2^-9."""
    a = v.abs()
    _, e = torch.frexp(a)                       # a = m·2^e, m in [0.5,1) → floor(log2 a) = e−1
    e = torch.clamp(e - 1, min=-6)
    step = torch.ldexp(torch.ones_like(a), e - 3)
    return torch.sign(v) * torch.round(a / step) * step


def e2m1_round(v):
    """Round float32 `v` (within ±6) to the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the
    even grid index (model.md §4).  Grid step is 0.5 below 2, 1 below 4, 2 above; rounding
    half-even on each step gives exactly the even-index tie rule.  Zero comes out as +0 (§9.3)."""
    a = v.abs()
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    q = torch.round(a / step) * step
    return torch.where(q == 0, torch.zeros_like(q), torch.sign(v) * q)


def _blocks(x, block):
    if x.shape[-1] % block:
        raise ValueError(f"fake-quant: last dimension {x.shape[-1]} is not a multiple of block {block}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def fp8_block_qdq(x, block=32):
    """Window KV (§4): per 32-channel block, scale = 2^ceil(log2(max(amax,1e-4)·(1/448))),
    value = e4m3(clamp(x/scale, ±448))·scale."""
    xf = x.float()
    b = _blocks(xf.detach(), block)
    amax = b.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    scale = _pow2_ceil_log2(amax * (1.0 / 448.0))
    q = e4m3_round(torch.clamp(b / scale, -448.0, 448.0)) * scale
    return _ste(xf, q.reshape(xf.shape)).to(x.dtype)


def nvfp4_qdq(x, block=16):
    """Compressed ("main") KV rows (§4, §9.4): per 16 channels, scale = e4m3(max(amax, 6·2^-9)/6)
    (no 448 cap, §9.4), codes = e2m1(clamp(x/scale, ±6))."""
    xf = x.float()
    b = _blocks(xf.detach(), block)
    amax = b.abs().amax(dim=-1, keepdim=True)
    scale = e4m3_round(torch.clamp(amax, min=6.0 * 2.0 ** -9) / 6.0)
    q = e2m1_round(torch.clamp(b / scale, -6.0, 6.0)) * scale
    return _ste(xf, q.reshape(xf.shape)).to(x.dtype)


def mxfp4_qdq(x, block=32):
    """Indexer keys and queries (§4): per 32 channels, scale = 2^ceil(log2(max(amax, 6·2^-126)·(1/6))),
    codes = e2m1(clamp(x/scale, ±6))."""
    xf = x.float()
    b = _blocks(xf.detach(), block)
    amax = b.abs().amax(dim=-1, keepdim=True).clamp(min=6.0 * 2.0 ** -126)
    scale = _pow2_ceil_log2(amax * (1.0 / 6.0))
    q = e2m1_round(torch.clamp(b / scale, -6.0, 6.0)) * scale
    return _ste(xf, q.reshape(xf.shape)).to(x.dtype)
