"""Hand-written safetensors reader/writer (no `safetensors` package on Debian).

Format: 8-byte little-endian header length N, then N bytes of JSON
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw
little-endian tensor bytes.  Spec: model.md §2 (dtypes and the FP8/FP4 packing).

Reading returns raw numpy arrays per dtype; `dequantise_state` turns the release packing
(F8_E4M3 + F8_E8M0 32×32 block scales, I8 FP4 experts with per-row/32-column scales) into
float32 torch tensors.
"""
import json
import struct

import numpy as np
import torch

_NP_DTYPES = {
    "F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
    # Formats numpy has no type for: kept as raw integers and decoded below.
    "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
}


def read_safetensors(path):
    """Returns {name: (dtype_string, numpy array of the stored element type)}."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(data)}")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        b, e = info["data_offsets"]
        arr = np.frombuffer(data, dtype=_NP_DTYPES[dt], count=(e - b) // np.dtype(_NP_DTYPES[dt]).itemsize,
                            offset=base + b)
        shape = list(info["shape"])
        if int(np.prod(shape)) != arr.size:
            raise ValueError(f"{path}: tensor {name}: shape {shape} does not match {e - b} bytes of {dt}")
        out[name] = (dt, arr.reshape(shape).copy())
    return out


def bf16_bits_to_f32(bits):
    """BF16 (uint16 bit patterns) → float32: the upper half of the float32 word."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _e4m3_table():
    """All 256 F8_E4M3 (fn variant: no infinities, 0x7f/0xff = NaN) values as float32."""
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 0x7
        if e == 0xF and m == 0x7:
            t[b] = np.nan
        elif e == 0:
            t[b] = s * m * 2.0 ** -9          # subnormal: m/8 · 2^-6
        else:
            t[b] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


_E4M3 = _e4m3_table()
_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def e8m0_to_f32(bits):
    """UE8M0 scale bytes → 2^(b−127) (0xff would be NaN; not expected in checkpoints)."""
    return np.ldexp(np.float32(1.0), bits.astype(np.int32) - 127).astype(np.float32)


def to_float(dt, arr):
    """One stored tensor → float32 numpy (no scales applied)."""
    if dt == "BF16":
        return bf16_bits_to_f32(arr)
    if dt == "F8_E4M3":
        return _E4M3[arr]
    if dt == "F8_E8M0":
        return e8m0_to_f32(arr)
    return arr.astype(np.float32)


def _block_of_scale(rows, cols, srows, scols):
    """The block a scale shape [srows, scols] stands for (model.md §2: loaders infer it): the
    first of 32×32, 128×128, 1×32 whose ceil-divided grid is that shape — the engine's rule, which
    matters where a dimension is not a multiple of the block (a [16, 48] weight with a [1, 2]
    scale has 32-column blocks, not 24) — else the ceil quotient of the sizes."""
    for br, bc in ((32, 32), (128, 128), (1, 32)):
        if -(-rows // br) == srows and -(-cols // bc) == scols:
            return br, bc
    return -(-rows // srows), -(-cols // scols)


def _expand_scale(scale, rows, cols):
    """Block scale [ceil(rows/br), ceil(cols/bc)] → per-element [rows, cols]."""
    br, bc = _block_of_scale(rows, cols, scale.shape[0], scale.shape[1])
    return np.repeat(np.repeat(scale, br, axis=0), bc, axis=1)[:rows, :cols]


def dequantise_state(raw):
    """{name: (dtype, array)} → {name: float32 torch tensor}, folding `.scale` companions.

    F8_E4M3 weight + `.scale` (F8_E8M0 or float) → weight · block scale (model.md §2);
    I8 weight + `.scale` → two E2M1 codes per byte (even column in the low nibble) · scale per
    row per 32 columns (FP4 experts); a float weight with a `.scale` (e.g. the fixtures'
    `engram.embed.scale`) is multiplied the same way.  Integer tensors other than packed FP4
    weights are returned as int64.
    """
    out = {}
    scales = {n[:-len(".scale")]: n for n in raw if n.endswith(".scale")}
    for name, (dt, arr) in raw.items():
        if name.endswith(".scale") and name[:-len(".scale")] + ".weight" in raw:
            continue
        sname = scales.get(name[:-len(".weight")]) if name.endswith(".weight") else None
        if dt == "I8" and sname is not None:
            codes = arr.view(np.uint8)
            lo = _E2M1[codes & 0xF]
            hi = _E2M1[codes >> 4]
            w = np.stack([lo, hi], axis=-1).reshape(arr.shape[0], arr.shape[1] * 2)
        elif dt in ("I64", "I32", "I16", "I8", "U8", "BOOL"):
            out[name] = torch.from_numpy(arr.astype(np.int64))
            continue
        else:
            w = to_float(dt, arr)
        if sname is not None:
            sdt, sarr = raw[sname]
            s = to_float(sdt, sarr)
            if w.ndim != 2 or s.ndim != 2:
                raise ValueError(f"tensor {name}: scale {sname} needs 2-D weight and scale")
            w = w * _expand_scale(s, w.shape[0], w.shape[1])
        out[name] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
    return out


# ---------------------------------------------------------------------------------------------
# The release's stored weight formats (model.md §2), for writing checkpoints in them

def _pow2_exponent_ceil(y):
    """ceil(log2(y)) for y > 0, exact (frexp, no log rounding)."""
    m, e = np.frexp(y)
    return np.where(m == 0.5, e - 1, e).astype(np.int32)


def _e4m3_codes(v):
    """float32 values already on the E4M3 grid (|v| ≤ 448) → their F8_E4M3 bytes."""
    pos = _E4M3[:0x7f]                      # 0x00…0x7e ascending, 0x7f is NaN
    idx = np.searchsorted(pos, np.abs(v))
    if not np.array_equal(pos[np.minimum(idx, 0x7e)], np.abs(v)):
        raise ValueError("e4m3 encode: a value is not on the E4M3 grid")
    return (idx | np.where(v < 0, 0x80, 0)).astype(np.uint8)


def quantise_fp8_block(w, block=32):
    """float [rows, cols] → (F8_E4M3 codes uint8 [rows, cols], F8_E8M0 scale bytes uint8
    [ceil(rows/32), ceil(cols/32)]): one power-of-two scale per 32×32 block,
    2^ceil(log2(amax/448)), codes round-to-nearest-even (edge blocks are partial)."""
    from .quant import e4m3_round
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    pad = np.zeros((br * block, bc * block), dtype=np.float32)
    pad[:rows, :cols] = w
    amax = np.abs(pad.reshape(br, block, bc, block)).max(axis=(1, 3))
    e = _pow2_exponent_ceil(np.maximum(amax, 2.0 ** -100) / 448.0)
    scale = np.ldexp(np.float32(1.0), e).astype(np.float32)
    s_full = np.repeat(np.repeat(scale, block, 0), block, 1)[:rows, :cols]
    q = e4m3_round(torch.clamp(torch.from_numpy(w / s_full), -448.0, 448.0)).numpy()
    return _e4m3_codes(q), (e + 127).astype(np.uint8)


def quantise_fp4_rows(w, block=32):
    """float [rows, cols] (cols even) → (I8 packed codes [rows, cols/2], F8_E8M0 scale bytes
    [rows, ceil(cols/32)]): the routed-expert format — per row per 32 columns a scale
    2^ceil(log2(amax/6)), E2M1 codes, two per byte (even column in the low nibble)."""
    from .quant import e2m1_round
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    if cols % 2:
        raise ValueError(f"FP4 packing needs an even column count, got {cols}")
    nb = -(-cols // block)
    pad = np.zeros((rows, nb * block), dtype=np.float32)
    pad[:, :cols] = w
    amax = np.abs(pad.reshape(rows, nb, block)).max(axis=2)
    e = _pow2_exponent_ceil(np.maximum(amax, 2.0 ** -100) / 6.0)
    s_full = np.repeat(np.ldexp(np.float32(1.0), e).astype(np.float32), block, 1)[:, :cols]
    q = e2m1_round(torch.clamp(torch.from_numpy(w / s_full), -6.0, 6.0)).numpy()
    mag = np.searchsorted(_E2M1[:8], np.abs(q))
    if not np.array_equal(_E2M1[np.minimum(mag, 7)], np.abs(q)):
        raise ValueError("e2m1 encode: a value is not on the E2M1 grid")
    codes = (mag | np.where(q < 0, 8, 0)).astype(np.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.view(np.int8), (e + 127).astype(np.uint8)


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Writes {name: torch tensor} as F32 or BF16 (float tensors) / I64 (integer tensors);
    `dtype` is one name for all float tensors or a {name: "F32"|"BF16"|"I32"} map. A value may
    also be a (dtype string, numpy array) pair, written as those raw elements (stored formats:
    ("F8_E4M3", uint8 codes), ("F8_E8M0", uint8 exponents), ("I8", packed FP4)…).

    Keys are sorted (as the reference writer does); offsets are 8-byte aligned by padding the
    JSON header with spaces."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        if isinstance(tensors[name], tuple):
            dt, arr = tensors[name]
            if dt not in _NP_DTYPES:
                raise ValueError(f"tensor {name}: unsupported dtype {dt}")
            arr = np.ascontiguousarray(arr)
            if arr.dtype != np.dtype(_NP_DTYPES[dt]) and not (dt == "I8" and arr.dtype == np.uint8):
                raise ValueError(f"tensor {name}: {dt} needs numpy {np.dtype(_NP_DTYPES[dt])}, got {arr.dtype}")
            b = arr.tobytes()
            header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
            blobs.append(b)
            offset += len(b)
            continue
        t = tensors[name].detach().cpu().contiguous()
        want = dtype.get(name, "F32") if isinstance(dtype, dict) else dtype
        if t.is_floating_point():
            if want == "BF16":
                # round-to-nearest-even through torch's bfloat16 conversion
                a = t.float().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
                dt = "BF16"
            else:
                a = t.float().numpy()
                dt = "F32"
        elif want == "I32":
            a = t.int().numpy()
            dt = "I32"
        else:
            a = t.long().numpy()
            dt = "I64"
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
