"""Pieces shared by the portable Triton kernels (triton_fwd.py, triton_bwd.py).

* ``head_base`` / ``tile_ptrs`` / ``key_range`` / ``load_tile`` / ``store_tile`` / ``round_to`` /
  ``mma_operand``: small ``@triton.jit`` helpers for (rows, head_dim) tiles, the causal key range,
  rounding and tensor-core operands.
  Kernels take an ``INTERPRETER`` constexpr that selects the interpreter's workarounds (see
  ``round_to`` and ``mma_operand``).
* :func:`use_interpreter`: whether a launch runs in Triton's CPU interpreter.
* :class:`CompileSpec`: everything needed to compile one kernel ahead of time for sm_90a on a
  machine without a GPU, and :func:`ptxas_report` to read registers, spills and shared memory off
  the result. The kernel modules build these with their ``compile_specs(head_dim, dtype, causal,
  cfg=None)`` functions; :func:`sm90_reports` compiles and reports one problem class's production
  kernels (used by tests/test_triton_compile_sm90.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

__all__ = ["head_base", "tile_ptrs", "key_range", "load_tile", "store_tile", "round_to",
           "mma_operand", "use_interpreter", "triton_dtype", "CompileSpec", "KernelReport",
           "ptxas_report", "sm90_reports", "SM90_SHARED_MEMORY_LIMIT", "LOG2E", "LN2"]

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): a base-2 logarithm times LN2 is the natural one

# Largest dynamic shared memory one thread block may use on H100/H200 (227 KiB).
SM90_SHARED_MEMORY_LIMIT = 232448


def use_interpreter(t: torch.Tensor) -> bool:
    """True when kernels launched on ``t`` run in Triton's interpreter (TRITON_INTERPRET=1, CPU)."""
    return t.device.type == "cpu" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_dtype(dtype: torch.dtype) -> str:
    """The signature name of a torch dtype's element type ('fp16', 'bf16', 'fp32')."""
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]


# --- device helpers --------------------------------------------------------------------------

@triton.jit
def head_base(ptr, batch, head, stride_b, stride_h):
    """Pointer to position 0 of one (batch, head) of a (batch, seqlen, heads, head_dim) tensor."""
    return ptr + tl.cast(batch, tl.int64) * stride_b + tl.cast(head, tl.int64) * stride_h


@triton.jit
def tile_ptrs(base, start, stride_s, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """Pointers to the (BLOCK_ROWS, BLOCK_D) tile of positions start.. below ``head_base``.

    The row offset is 64-bit; the in-tile offsets are loop-invariant, so a loop that calls this
    with a new ``start`` carries only that scalar (loop-carried pointer tensors cost registers).
    """
    rows = tl.arange(0, BLOCK_ROWS)
    offs_d = tl.arange(0, BLOCK_D)
    return base + tl.cast(start, tl.int64) * stride_s + (rows[:, None] * stride_s + offs_d[None, :])


@triton.jit
def key_range(start_m, seqlen_q, seqlen_k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr):
    """The keys a tile of query rows [start_m, start_m + BLOCK_M) attends to, as (full_end, end_n).

    Keys [0, full_end) are whole BLOCK_N blocks visible to every row of the tile (no mask needed);
    keys [full_end, end_n) need a mask (the causal diagonal, the ragged end of seqlen_k). With the
    bottom-right causal mask query i sees key j iff j <= i + seqlen_k - seqlen_q, so the tile needs
    no key past its last row's diagonal; rows that see no key at all give end_n = 0.
    """
    if CAUSAL:
        diagonal = seqlen_k - seqlen_q
        last_row = tl.minimum(start_m + BLOCK_M, seqlen_q) - 1
        end_n = tl.maximum(tl.minimum(seqlen_k, last_row + diagonal + 1), 0)
        full_end = tl.maximum(tl.minimum(seqlen_k, start_m + diagonal + 1), 0) // BLOCK_N * BLOCK_N
    else:
        end_n = seqlen_k
        full_end = seqlen_k // BLOCK_N * BLOCK_N
    return full_end, end_n


@triton.jit
def load_tile(ptrs, rows, n_rows, CHECK_ROWS: tl.constexpr, HEAD_DIM: tl.constexpr,
              BLOCK_D: tl.constexpr):
    """Load a (rows, BLOCK_D) tile. Rows >= n_rows (if CHECK_ROWS) and columns >= HEAD_DIM read 0.

    Masks are emitted only where needed: full blocks of a power-of-two head_dim load unmasked.
    """
    offs_d = tl.arange(0, BLOCK_D)
    if CHECK_ROWS:
        if HEAD_DIM == BLOCK_D:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM),
                        other=0.0)
    else:
        if HEAD_DIM == BLOCK_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return x


@triton.jit
def store_tile(ptrs, x, rows, n_rows, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Store a (rows, BLOCK_D) tile, skipping rows >= n_rows and columns >= HEAD_DIM."""
    offs_d = tl.arange(0, BLOCK_D)
    if HEAD_DIM == BLOCK_D:
        tl.store(ptrs, x, mask=rows[:, None] < n_rows)
    else:
        tl.store(ptrs, x, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def round_to(x, DTYPE: tl.constexpr, INTERPRETER: tl.constexpr):
    """``x`` converted to DTYPE, rounding to nearest-even as the GPU's conversion does.

    The 3.6 interpreter's float32 -> bfloat16 conversion truncates instead; there the rounding is
    done on the float32 bits first, so that interpreter results match the GPU's.
    """
    if INTERPRETER and DTYPE == tl.bfloat16 and x.dtype == tl.float32:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(DTYPE)


@triton.jit
def mma_operand(x, DTYPE: tl.constexpr, INTERPRETER: tl.constexpr):
    """A tl.dot operand: ``x`` rounded to the inputs' 16-bit DTYPE, as the tensor cores take it.

    In the interpreter, whose bfloat16 tl.dot is broken, the rounded value is widened back to
    float32, so the interpreter multiplies the same numbers as the GPU.
    """
    x = round_to(x, DTYPE, INTERPRETER)
    if INTERPRETER:
        x = x.to(tl.float32)
    return x


# --- ahead-of-time compilation for sm_90a ------------------------------------------------------

@dataclass(frozen=True)
class CompileSpec:
    """One kernel specialisation: ``triton.compile`` inputs for a given config, dtype and head_dim.

    ``divisible`` names the arguments taken as 16-aligned pointers / multiples of 16, as Triton's
    launch-time specialisation finds them for the usual contiguous inputs.
    """

    name: str
    fn: triton.runtime.JITFunction
    signature: dict
    constexprs: dict
    num_warps: int
    num_stages: int
    divisible: tuple = field(default_factory=tuple)

    def compile(self, capability: int = 90):
        """triton.compile for sm_{capability}(a). Needs a process without TRITON_INTERPRET=1."""
        from triton.backends.compiler import GPUTarget

        if not isinstance(self.fn, triton.runtime.JITFunction):
            raise RuntimeError("ahead-of-time compilation needs a process without "
                               "TRITON_INTERPRET=1 (under the interpreter nothing is compiled)")
        arg_names = self.fn.arg_names
        assert list(self.signature) == arg_names, "signature must list every argument, in order"
        attrs = {(arg_names.index(a),): [["tt.divisibility", 16]] for a in self.divisible}
        src = triton.compiler.ASTSource(self.fn, self.signature, constexprs=self.constexprs,
                                        attrs=attrs)
        return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                              options={"num_warps": self.num_warps, "num_stages": self.num_stages})


@dataclass(frozen=True)
class KernelReport:
    """Resources of a compiled kernel, as ptxas reports them."""

    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared: int  # bytes of shared memory the launch needs (Triton's metadata)
    uses_wgmma: bool

    @property
    def spills(self) -> int:
        """Bytes spilled to local memory, stores and loads together (0 for a healthy kernel)."""
        return self.spill_stores + self.spill_loads

    def __str__(self) -> str:
        return (f"{self.name}: {self.registers} registers, {self.spill_stores}+{self.spill_loads} "
                f"bytes spilled (stores+loads), {self.shared} B shared, "
                f"wgmma={'yes' if self.uses_wgmma else 'no'}")


def ptxas_report(name: str, compiled, capability: int = 90) -> KernelReport:
    """Run the wheel's ptxas with -v on a compiled kernel's PTX and parse registers and spills."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptx = compiled.asm["ptx"]
    arch = f"sm_{capability}a" if capability == 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        log = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={arch}", src,
                              "-o", os.path.join(tmp, "kernel.cubin")],
                             check=True, capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return KernelReport(name=name, registers=int(regs.group(1)),
                        spill_stores=int(spills.group(1)), spill_loads=int(spills.group(2)),
                        shared=int(compiled.metadata.shared), uses_wgmma="wgmma.mma_async" in ptx)


def sm90_reports(head_dim: int, dtype: torch.dtype, causal: bool) -> list[KernelReport]:
    """Compile the forward and backward kernels' production configs for sm_90a and report each.

    For one problem class (head_dim, dtype, causal); takes a few seconds per kernel on a CPU.
    """
    from . import triton_bwd, triton_fwd

    specs = (triton_fwd.compile_specs(head_dim, dtype, causal)
             + triton_bwd.compile_specs(head_dim, dtype, causal))
    return [ptxas_report(spec.name, spec.compile()) for spec in specs]
