"""Vectors as an engine hands them over (numpy arrays or PyTorch tensors) and
their conversion to a session's wire element type (client/src/vectors.cc);
also a step's slot ids and pinned flags, which come the same way.

Accepted element types: float32 ("f32"), float16 ("f16"), bfloat16 ("bf16":
a torch.bfloat16 tensor, a numpy uint16 array of bfloat16 bit patterns, or
any array wrapped in `Bf16(...)`). float64 is rounded to float32 first.
Arrays are read in C order whatever their shape: only the element count is
checked, as C++ checks a span's size. Conversion is round-to-nearest-even,
as core's element_type.cc; when the types agree the bytes are taken as they
are (no conversion).
"""

from __future__ import annotations

import math
from typing import Any, List, Tuple

import numpy as np

from .errors import invalid

try:  # PyTorch is optional.
    import torch as _torch  # type: ignore
except Exception:  # pragma: no cover - depends on the machine
    _torch = None


class Bf16:
    """Marks an array of uint16 (or int16) values as bfloat16 bit patterns."""

    def __init__(self, bits: Any):
        self.bits = bits


class F16Bits:
    """Marks an array of uint16 values as IEEE binary16 bit patterns."""

    def __init__(self, bits: Any):
        self.bits = bits


_U64_MAX = (1 << 64) - 1

_DTYPES = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "bf16": np.dtype("<u2")}


def _from_torch(x: Any, name: str) -> Tuple[np.ndarray, str]:
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == _torch.bfloat16:
        return t.contiguous().view(_torch.int16).numpy().view(np.uint16).reshape(-1), "bf16"
    if t.dtype == _torch.float16:
        return t.contiguous().numpy().reshape(-1), "f16"
    if t.dtype == _torch.float32:
        return t.contiguous().numpy().reshape(-1), "f32"
    if t.dtype == _torch.float64:
        return t.numpy().astype(np.float32).reshape(-1), "f32"
    raise invalid(f"{name}: unsupported tensor dtype {t.dtype} "
                  "(want float32, float16 or bfloat16)")


def _bits(x: Any, what: str, view: Any) -> np.ndarray:
    """The flat uint16 bit patterns of a Bf16 / F16Bits, viewed as `view`."""
    a = np.ascontiguousarray(np.asarray(x.bits))
    if a.dtype not in (np.uint16, np.int16):
        raise invalid(f"{what} must be uint16, not {a.dtype}")
    return a.view(view).reshape(-1)


def as_vector(x: Any, name: str) -> Tuple[np.ndarray, str]:
    """(flat little-endian array, element type) of an engine's vector.
    None or an empty sequence is an empty f32 vector."""
    if x is None:
        return np.zeros(0, np.float32), "f32"
    if isinstance(x, Bf16):
        return _bits(x, f"{name}: Bf16 bits", np.uint16), "bf16"
    if isinstance(x, F16Bits):
        return _bits(x, f"{name}: F16Bits", np.float16), "f16"
    if _torch is not None and isinstance(x, _torch.Tensor):
        return _from_torch(x, name)
    a = np.asarray(x)
    if a.size == 0:
        return np.zeros(0, np.float32), "f32"
    if a.dtype == np.float32:
        kind = "f32"
    elif a.dtype == np.float16:
        kind = "f16"
    elif a.dtype == np.uint16:
        kind = "bf16"
    elif a.dtype == np.float64:
        a, kind = a.astype(np.float32), "f32"
    else:
        raise invalid(f"{name}: unsupported dtype {a.dtype} (want float32, "
                      "float16, or uint16 bfloat16 bit patterns)")
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return a.reshape(-1), kind


def host_array(x: Any) -> np.ndarray:
    """A numpy view of an engine's list, array or (torch) tensor."""
    if hasattr(x, "detach"):  # A torch tensor.
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def slot_list(slot_ids: Any) -> List[int]:
    """A step's slot ids as ints; raises INVALID_ARGUMENT for a non-integer
    array or an id outside [0, 2^64)."""
    if slot_ids is None:
        return []
    a = host_array(slot_ids)
    if a.size == 0:
        return []
    if a.dtype.kind not in "ui":
        raise invalid(f"append.slot_ids: unsupported dtype {a.dtype} (want integers)")
    ids = [int(x) for x in a.reshape(-1).tolist()]
    for sid in ids:
        if sid < 0 or sid > _U64_MAX:
            raise invalid(f"append.slot_ids: slot {sid} is outside [0, 2^64)")
    return ids


def pinned_list(pinned: Any) -> List[bool]:
    """A step's pinned flags as bools (None: none)."""
    if pinned is None:
        return []
    return [bool(x) for x in host_array(pinned).reshape(-1).tolist()]


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaN stays a quiet NaN (element_type.cc)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def to_float32(a: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f32":
        return a
    if kind == "f16":
        return a.astype(np.float32)
    return bf16_to_f32(a)


def convert(a: np.ndarray, kind: str, target: str) -> np.ndarray:
    """`a` (of element type `kind`) as `target` elements, little-endian."""
    if kind == target:
        return a
    f = to_float32(a, kind)
    if target == "f32":
        return f
    if target == "f16":
        return f.astype(np.float16)
    return f32_to_bf16(f)


def entropy_of_logits(logits: Any) -> float:
    """H(softmax(logits)) in nats, with a stable log-sum-exp, as C++'s
    EntropyFromLogits (equal to float rounding: numpy's exp and summation
    order are not glibc's). Raises INVALID_ARGUMENT naming `logits`."""
    a, kind = as_vector(logits, "logits")
    x = to_float32(a, kind).astype(np.float64)
    if x.size == 0:
        raise invalid("logits: empty")
    finite = np.isfinite(x)
    if not finite.all():
        raise invalid(f"logits: non-finite value at index {int(np.argmin(finite))}")
    x = x - x.max()
    e = np.exp(x)
    z = float(e.sum())
    h = math.log(z) - float((e * x).sum()) / z
    return h if h > 0.0 else 0.0
