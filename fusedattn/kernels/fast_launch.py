"""Launching a compiled Gluon kernel again without Triton's per-call binding (host time).

Triton's JITFunction.run binds and specialises every argument on every call, and the checks of a
host TensorDescriptor cost more: together 100-170 us of host time per call on the H200's host
(device runs 8-9), which at short sequences is exposed. After the first launch of a kernel for a
given specialisation, a later launch whose key (everything the specialisation depends on) was
seen before goes straight to the compiled kernel (CompiledKernel[grid](*all_arguments), Triton's
launch of a compiled kernel), with the full argument list of that first launch as a template in
which only the runtime arguments are replaced. Each kernel module builds its own key and checks
it against Triton's binder in its CPU tests (tests/test_hopper_compile.py,
tests/test_hopper_fp8_compile.py).
"""
from __future__ import annotations

import torch
from triton import knobs


def context_key(device: torch.device):
    """What a launch depends on besides its arguments: the current CUDA device (Triton loads the
    kernel there) and the knobs Triton folds into its compile options (debug, instrumentation)."""
    current = torch.cuda.current_device() if device.type == "cuda" else None
    return current, knobs.runtime.debug, knobs.compilation.instrumentation_mode


class DescArg:
    """What Triton's launcher reads from a host tensor descriptor (make_tensordesc_arg)."""
    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, t):
        self.base = t
        self.shape = list(t.shape)   # as the kernels' _descriptor: the tensor's shape and strides
        self.strides = list(t.stride())
        self.padding = "zero"


def int_key(x: int):
    """What Triton 3.6 looks at in a specialised int argument."""
    return (x == 1, x % 16 == 0, -2 ** 31 <= x < 2 ** 31)


def remember(store: dict, key, kernel, compiled, args, kwargs, runtime_names) -> None:
    """After a launch through Triton: the compiled kernel and its full argument list (Triton's
    bound arguments: the signature's order, defaults filled in) as a template for the key, with
    the positions of the runtime arguments (runtime_names) in it."""
    if compiled is None or hasattr(compiled, "result"):
        return
    params = kernel.signature.parameters
    vals = {n: p.default for n, p in params.items() if p.default is not p.empty}
    vals.update(zip(params, args))
    vals.update((n, v) for n, v in kwargs.items() if n in params)
    names = tuple(params)
    index = {n: names.index(n) for n in runtime_names if n in params}
    template = [vals[n] for n in names]
    for i in index.values():   # hold no tensor of the first call (it may be large)
        if isinstance(template[i], torch.Tensor) or hasattr(template[i], "block_shape"):
            template[i] = None
    store[key] = (compiled, template, index)


def arglist(template, index, runtime: dict) -> list:
    """The template with the runtime arguments put in."""
    args = list(template)
    for name, val in runtime.items():
        args[index[name]] = val
    return args
