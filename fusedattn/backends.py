"""Backends: who can compute attention for which inputs, and why not.

Each backend declares what it supports through :meth:`Backend.why_not`, which returns ``None`` when
it can take a call and otherwise a sentence a user can read. ``backend="auto"`` takes the first
backend of :data:`PREFERENCE` (fastest first) that can take the call; :func:`fusedattn.explain`
prints the whole decision.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["Problem", "Backend", "BACKENDS", "PREFERENCE", "get_backend", "resolve"]


@dataclass(frozen=True)
class Problem:
    """What a backend needs to know about a call to decide whether it can take it."""

    device: torch.device
    dtype: torch.dtype
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor, causal: bool) -> "Problem":
        return cls(q.device, q.dtype, q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2],
                   q.shape[3], bool(causal))


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device, None for any other device."""
    if device.type != "cuda":
        return None
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


def triton_interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Backend:
    """A way to compute attention.

    ``forward(q, k, v, causal, softmax_scale) -> (out, lse)`` and
    ``backward(dout, q, k, v, out, lse, causal, softmax_scale, dlse) -> (dq, dk, dv)`` follow
    CONTRACTS.md; the loaders import the kernel modules only when first used.
    """

    name: str
    summary: str
    dtypes: tuple[torch.dtype, ...]
    check: Callable[[Problem], str | None]
    load_forward: Callable[[], Callable]
    load_backward: Callable[[], Callable] | None
    # False while a backend is experimental: it runs when asked for by name, never by "auto".
    in_auto: bool = True

    def why_not(self, p: Problem) -> str | None:
        if p.dtype not in self.dtypes:
            names = ", ".join(_name(d) for d in self.dtypes)
            return f"it supports {names}, not {_name(p.dtype)}"
        return self.check(p)

    @property
    def forward(self) -> Callable:
        return self.load_forward()

    @property
    def backward(self) -> Callable:
        if self.load_backward is None:
            raise NotImplementedError(f"backend {self.name!r} has no backward pass")
        return self.load_backward()


# --- reference -------------------------------------------------------------------------------

def _check_reference(p: Problem) -> str | None:
    return None


def _load_reference_forward():
    from . import reference
    return reference.attention_forward


def _load_reference_backward():
    from . import reference
    return reference.attention_backward


# --- triton ----------------------------------------------------------------------------------

def _check_triton(p: Problem) -> str | None:
    if p.device.type == "cuda":
        if torch.version.hip is None and device_capability(p.device) < (8, 0):
            major, minor = device_capability(p.device)
            return f"it needs an NVIDIA GPU of compute capability 8.0 or newer, this one is {major}.{minor}"
        return None
    if p.device.type == "cpu" and triton_interpreter_active():
        return None  # the Triton interpreter runs the kernels on the CPU (slow; for tests)
    return (f"it runs on CUDA GPUs (or on the CPU under TRITON_INTERPRET=1), "
            f"and the inputs are on {p.device.type}")


def _load_triton_forward():
    from .kernels import triton_fwd
    return triton_fwd.forward


def _load_triton_backward():
    from .kernels import triton_bwd
    return triton_bwd.backward


# --- hopper ----------------------------------------------------------------------------------

def _check_hopper(p: Problem) -> str | None:
    if p.device.type != "cuda":
        return f"it runs on Hopper GPUs (sm_90) only, and the inputs are on {p.device.type}"
    if device_capability(p.device) != (9, 0):
        major, minor = device_capability(p.device)
        return f"it needs a Hopper GPU (compute capability 9.0), this one is {major}.{minor}"
    try:
        from .kernels import hopper_fwd
    except ImportError as e:  # pragma: no cover - depends on the installed Triton
        return f"its Gluon kernels could not be imported ({e})"
    if p.head_dim not in hopper_fwd.SUPPORTED_HEAD_DIMS:
        dims = ", ".join(str(d) for d in hopper_fwd.SUPPORTED_HEAD_DIMS)
        return f"it supports head_dim {dims}, not {p.head_dim}"
    return None


def _load_hopper_forward():
    from .kernels import hopper_fwd
    return hopper_fwd.forward


_HALF = (torch.float16, torch.bfloat16)

BACKENDS: dict[str, Backend] = {
    "hopper": Backend(
        name="hopper",
        summary="Gluon kernels for Hopper (sm_90): warp-specialised, TMA, wgmma; forward only",
        dtypes=_HALF,
        check=_check_hopper,
        load_forward=_load_hopper_forward,
        load_backward=None,
        # In "auto" since 2026-12-02: the GPU test grid passed on an H200 (fwd, with the triton
        # backward), memcheck clean, bitwise deterministic; racecheck's reports were traced to
        # Triton's warp-specialisation bookkeeping (RESULTS.md, "racecheck confirmation").
        in_auto=True,
    ),
    "triton": Backend(
        name="triton",
        summary="portable Triton kernels (FlashAttention-2 style forward and backward)",
        dtypes=_HALF,
        check=_check_triton,
        load_forward=_load_triton_forward,
        load_backward=_load_triton_backward,
    ),
    "reference": Backend(
        name="reference",
        summary="PyTorch loop over key blocks: slow, readable, any device",
        dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64),
        check=_check_reference,
        load_forward=_load_reference_forward,
        load_backward=_load_reference_backward,
    ),
}

# Fastest first: "auto" takes the first one that can run the call.
PREFERENCE: tuple[str, ...] = ("hopper", "triton", "reference")


def get_backend(name: str) -> Backend:
    return BACKENDS[name]


def resolve(p: Problem, requested: str) -> tuple[str, str]:
    """The (forward, backward) backend names for a call; raises ValueError with the reasons.

    A backend without a backward pass (``hopper`` today) has its gradients computed by the fastest
    backend that has one; :func:`fusedattn.explain` says so.
    """
    if requested == "auto":
        reasons = {}
        fwd = None
        for name in PREFERENCE:
            reasons[name] = BACKENDS[name].why_not(p)
            if reasons[name] is None and BACKENDS[name].in_auto:
                fwd = name
                break
        if fwd is None:  # cannot happen while "reference" accepts every supported dtype
            detail = "; ".join(f"{n}: {r}" for n, r in reasons.items())
            raise ValueError(f"no fusedattn backend can take these inputs ({detail})")
    else:
        if requested not in BACKENDS:
            raise ValueError(f"backend must be one of 'auto', {', '.join(repr(n) for n in PREFERENCE)}; "
                             f"got {requested!r}")
        why = BACKENDS[requested].why_not(p)
        if why is not None:
            raise ValueError(f"backend={requested!r} cannot take these inputs: {why}")
        fwd = requested
    if BACKENDS[fwd].load_backward is not None:
        return fwd, fwd
    for name in PREFERENCE:
        if BACKENDS[name].load_backward is not None and BACKENDS[name].why_not(p) is None:
            return fwd, name
    raise AssertionError("the reference backend always has a backward")  # pragma: no cover
