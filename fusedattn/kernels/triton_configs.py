"""Tile configurations of the portable Triton kernels (triton_fwd.py, triton_bwd.py), in one table.

A configuration depends on the head_dim bucket ``BLOCK_D`` (head_dim rounded up to a power of two;
head_dim <= 64 shares the 64 row), on the pass and on whether the mask is causal; fp16 and bf16
share it. Every production entry compiles for sm_90a with no register spills and within the shared
memory of one H100/H200 SM: tests/test_triton_compile_sm90.py checks it, and the registers and
shared memory quoted below come from that compilation (Triton 3.6.0, bf16). None of the entries has
been timed yet: they are starting points to be measured on the H200.

Under the Triton interpreter (CPU tests) every kernel uses :data:`INTERPRETER_TILE`, 16 x 16, so
that short sequences still cross several blocks and ragged tails.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Tile",
    "BackwardConfig",
    "FORWARD",
    "BACKWARD",
    "INTERPRETER_TILE",
    "INTERPRETER_BACKWARD",
    "head_dim_block",
    "forward_config",
    "backward_config",
]


@dataclass(frozen=True)
class Tile:
    """One kernel's launch shape.

    Forward and dQ: a program owns ``block_m`` query rows and loops over keys ``block_n`` at a time.
    dK/dV: a program owns ``block_n`` keys and loops over query rows ``block_m`` at a time.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class BackwardConfig:
    """The backward's three kernels: preprocess (Delta, ``preprocess_block_m`` rows a program),
    dK/dV and dQ."""

    dkdv: Tile
    dq: Tile
    preprocess_block_m: int = 128


# Keyed by (BLOCK_D, causal).
FORWARD: dict[tuple[int, bool], Tile] = {
    # Initial guess, to be measured on H200: 128 x 128 tile over two warpgroups (8 warps, 64 query
    # rows each); 3 stages of K/V. Compiles to 163 (causal 196) registers, 112 KiB shared memory.
    (64, False): Tile(128, 128, 8, 3),
    (64, True): Tile(128, 128, 8, 3),
    # Initial guess, to be measured on H200: FA2's 128 x 64 tile, 8 warps, 3 stages: 173 (causal
    # 189) registers, 128 KiB. 128 x 128 with 2 stages is the first alternative to time: it
    # compiles clean without the causal mask but spills 8-16 bytes with it.
    (128, False): Tile(128, 64, 8, 3),
    (128, True): Tile(128, 64, 8, 3),
    # Initial guess, to be measured on H200: the 128 x 256 fp32 accumulator takes 128 registers per
    # thread, so the key block shrinks to 32: 243 (causal 252) registers, 160 KiB; 128 x 64 spills.
    (256, False): Tile(128, 32, 8, 3),
    (256, True): Tile(128, 32, 8, 3),
}

BACKWARD: dict[tuple[int, bool], BackwardConfig] = {
    # Initial guess, to be measured on H200: dK/dV 128 keys x 32 query rows a step (the Triton
    # tutorial's Hopper shape) on 8 warps: 217-220 registers, 48 KiB; dQ 128 x 64 on 8 warps:
    # 126 (causal 158) registers, 64 KiB.
    (64, False): BackwardConfig(dkdv=Tile(32, 128, 8, 2), dq=Tile(128, 64, 8, 2)),
    (64, True): BackwardConfig(dkdv=Tile(32, 128, 8, 2), dq=Tile(128, 64, 8, 2)),
    # Initial guess, to be measured on H200: the two 128 x 128 fp32 accumulators of dK/dV take half
    # the register file. 128 keys x 16 query rows a step keeps ~25 registers of headroom
    # (250-252 registers, 80 KiB); 128 x 32 is the first alternative to time: it compiles clean at
    # head_dim 128 with no headroom left and spills 4 bytes at head_dim 96. dQ 128 x 64: 203-226
    # registers, 128 KiB.
    (128, False): BackwardConfig(dkdv=Tile(16, 128, 8, 2), dq=Tile(128, 64, 8, 2)),
    (128, True): BackwardConfig(dkdv=Tile(16, 128, 8, 2), dq=Tile(128, 64, 8, 2)),
    # Initial guess, to be measured on H200: dK + dV of 64 keys already need 128 registers per
    # thread and spill a few bytes under wgmma (64 keys x 16 rows: 4-12 bytes), so dK/dV takes
    # 32 x 32 tiles, which Triton runs on mma.sync: 216-242 registers, 66 KiB, no spill.
    # dQ 128 x 32: 254 registers, 192 KiB.
    (256, False): BackwardConfig(dkdv=Tile(32, 32, 8, 2), dq=Tile(128, 32, 8, 2)),
    (256, True): BackwardConfig(dkdv=Tile(32, 32, 8, 2), dq=Tile(128, 32, 8, 2)),
}

# Interpreter (CPU tests): small tiles exercise multi-block loops and masked tails on short inputs.
INTERPRETER_TILE = Tile(16, 16, 4, 1)
INTERPRETER_BACKWARD = BackwardConfig(dkdv=INTERPRETER_TILE, dq=INTERPRETER_TILE,
                                      preprocess_block_m=16)


def head_dim_block(head_dim: int) -> int:
    """BLOCK_D: head_dim rounded up to a power of two, at least 16 (the smallest tl.dot K)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def _table_key(head_dim: int, causal: bool) -> tuple[int, bool]:
    return max(64, head_dim_block(head_dim)), bool(causal)


def forward_config(head_dim: int, causal: bool, interpreter: bool = False) -> Tile:
    return INTERPRETER_TILE if interpreter else FORWARD[_table_key(head_dim, causal)]


def backward_config(head_dim: int, causal: bool, interpreter: bool = False) -> BackwardConfig:
    return INTERPRETER_BACKWARD if interpreter else BACKWARD[_table_key(head_dim, causal)]
