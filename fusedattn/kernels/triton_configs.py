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
    "TUNE_PASSES",
    "TUNE_CANDIDATES",
    "KNOWN_SPILLING",
    "tune_candidates",
]


@dataclass(frozen=True)
class Tile:
    """One kernel's launch shape.

    Forward and dQ: a program owns ``block_m`` query rows and loops over keys ``block_n`` at a time.
    dK/dV: a program owns ``block_n`` keys and loops over query rows ``block_m`` at a time.

    ``block_n_masked`` (forward and dQ only; None: ``block_n``) is the key step of the masked blocks
    (causal diagonal, ragged end of seqlen_k); it must divide ``block_n``. A narrower masked step
    keeps the mask's extra registers out of a wide unmasked tile.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    block_n_masked: int | None = None

    @property
    def masked_step(self) -> int:
        """The key step of the masked loop (``block_n_masked``, else ``block_n``)."""
        step = self.block_n if self.block_n_masked is None else self.block_n_masked
        if step <= 0 or self.block_n % step:
            raise ValueError(f"block_n_masked={step} must divide block_n={self.block_n}")
        return step

    def __str__(self) -> str:
        masked = "" if self.block_n_masked is None else f"/m{self.block_n_masked}"
        return f"{self.block_m}x{self.block_n}{masked}w{self.num_warps}s{self.num_stages}"


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


# --- tuning candidates (scripts/triton_tune.py) -------------------------------------------------
# Alternatives to the production entries above, timed against them by scripts/triton_tune.py on the
# H200; nothing here is used unless passed explicitly (``config=``). Keyed by (pass, BLOCK_D bucket,
# causal), pass one of TUNE_PASSES: "fwd" (forward tile), "dkdv" / "dq" (that backward kernel's
# tile; the other one stays at its production entry). The default entry is always timed too and
# is not listed. Every candidate compiles for sm_90a (Triton 3.6.0, bf16) with no spill and within
# the shared memory of one SM: tests/test_triton_tune.py checks it. The registers and shared memory
# (KiB) from that compile are in the comments, "full / causal" where they differ. Tile(block_m,
# block_n, num_warps, num_stages[, block_n_masked]).
TUNE_PASSES = ("fwd", "dkdv", "dq")

_FWD_64 = (
    Tile(128, 128, 8, 2),             # 165 / 200 regs,  80 KiB
    Tile(128, 128, 8, 4),             # 163 / 198 regs, 144 KiB
    Tile(128, 128, 8, 3, 64),         # 151 / 180 regs, 112 KiB (diagonal 128 x 64)
    Tile(128, 64, 8, 3),              # 107 / 122 regs,  64 KiB
    Tile(128, 64, 4, 3),              # 193 / 244 regs,  64 KiB (one warpgroup)
    Tile(64, 128, 4, 3),              # 188 / 216 regs, 104 KiB
)
_DKDV_64 = (
    Tile(32, 128, 8, 3),              # 219 / 242 regs,  56 KiB
    Tile(16, 128, 8, 2),              # 186 / 185 regs,  40 KiB
    Tile(32, 64, 8, 2),               # 180 / 185 regs,  32 KiB
    Tile(32, 64, 4, 2),               # 237 / 242 regs,  32 KiB
    Tile(16, 64, 4, 2),               # 178 / 170 regs,  24 KiB
)
_DQ_64 = (
    Tile(128, 64, 8, 3),              # 126 / 127 regs,  80 KiB
    Tile(128, 128, 8, 2),             # 218 / 234 regs,  96 KiB
    Tile(128, 32, 8, 2),              # 116 / 112 regs,  48 KiB
    Tile(64, 64, 4, 2),               # 154 / 143 regs,  48 KiB
    Tile(64, 128, 4, 2),              # 225 / 234 regs,  80 KiB
)
_DKDV_256 = (  # no spill-free dK/dV tile of 256-wide head_dim gets wgmma (see KNOWN_SPILLING)
    Tile(16, 32, 8, 2),               # 230 / 178 regs,  49 KiB, mma.sync
    Tile(32, 32, 8, 3),               # 220 / 254 regs,  98 KiB, mma.sync
    Tile(32, 32, 8, 1),               # 174 / 172 regs,  80 KiB, mma.sync
)
_DQ_256 = (
    Tile(128, 32, 8, 3),              # 254 / 250 regs, 224 KiB
    Tile(128, 16, 8, 2),              # 220 / 229 regs, 160 KiB
    Tile(128, 32, 8, 2, 16),          # 255 / 231 regs, 192 KiB
)

TUNE_CANDIDATES: dict[tuple[str, int, bool], tuple[Tile, ...]] = {
    ("fwd", 64, False): _FWD_64,
    ("fwd", 64, True): _FWD_64,
    ("fwd", 128, False): (
        Tile(128, 128, 8, 2),         # 250 regs, 160 KiB
        Tile(128, 128, 8, 3),         # 254 regs, 224 KiB
        Tile(128, 128, 8, 3, 64),     # 236 regs, 224 KiB
        Tile(128, 64, 8, 2),          # 176 regs,  96 KiB
        Tile(128, 64, 8, 4),          # 174 regs, 160 KiB
        Tile(64, 64, 4, 3),           # 188 regs, 112 KiB
    ),
    ("fwd", 128, True): (  # every causal 128 x 128 spills, even with a narrower diagonal step
        Tile(128, 64, 8, 2),          # 194 regs,  96 KiB
        Tile(128, 64, 8, 4),          # 192 regs, 160 KiB
        Tile(128, 64, 8, 3, 32),      # 180 regs, 128 KiB
        Tile(128, 64, 8, 4, 32),      # 181 regs, 160 KiB
        Tile(64, 64, 4, 3),           # 239 regs, 112 KiB
    ),
    ("fwd", 256, False): (
        Tile(128, 32, 8, 2),          # 249 regs, 128 KiB
        Tile(128, 32, 8, 4),          # 243 regs, 192 KiB
        Tile(128, 64, 8, 2),          # 255 regs, 192 KiB
        Tile(128, 64, 8, 2, 32),      # 254 regs, 192 KiB
        Tile(64, 32, 4, 3),           # 255 regs, 128 KiB
    ),
    ("fwd", 256, True): (
        Tile(128, 32, 8, 2),          # 255 regs, 128 KiB
        Tile(128, 32, 8, 4),          # 248 regs, 192 KiB
        Tile(128, 64, 8, 2, 32),      # 255 regs, 192 KiB
        Tile(64, 32, 4, 3),           # 255 regs, 128 KiB
    ),
    ("dkdv", 64, False): _DKDV_64 + (Tile(64, 128, 8, 2),),  # 253 regs, 64 KiB (causal spills)
    ("dkdv", 64, True): _DKDV_64,
    ("dkdv", 128, False): (
        Tile(16, 128, 8, 3),          # 241 regs,  88 KiB
        Tile(32, 128, 8, 2),          # 255 regs,  96 KiB
        Tile(32, 64, 8, 2),           # 255 regs,  64 KiB
        Tile(32, 64, 8, 3),           # 244 regs,  81 KiB
        Tile(16, 64, 8, 2),           # 193 regs,  48 KiB
    ),
    ("dkdv", 128, True): (
        Tile(16, 128, 8, 3),          # 254 regs,  88 KiB
        Tile(32, 128, 8, 2),          # 255 regs,  96 KiB
        Tile(32, 64, 8, 2),           # 255 regs,  64 KiB
        Tile(16, 64, 8, 2),           # 187 regs,  48 KiB
    ),
    ("dkdv", 256, False): _DKDV_256,
    ("dkdv", 256, True): _DKDV_256,
    ("dq", 64, False): _DQ_64,
    ("dq", 64, True): _DQ_64,
    ("dq", 128, False): (
        Tile(128, 64, 8, 3),          # 201 regs, 160 KiB
        Tile(128, 64, 8, 2, 32),      # 204 regs, 128 KiB
        Tile(128, 64, 8, 3, 32),      # 198 regs, 160 KiB
        Tile(128, 32, 8, 2),          # 130 regs,  96 KiB
        Tile(64, 64, 4, 2),           # 248 regs,  96 KiB
        Tile(64, 64, 4, 3),           # 247 regs, 128 KiB
    ),
    ("dq", 128, True): (
        Tile(128, 64, 8, 3),          # 219 regs, 160 KiB
        Tile(128, 64, 8, 2, 32),      # 215 regs, 128 KiB
        Tile(128, 64, 8, 3, 32),      # 209 regs, 160 KiB
        Tile(128, 32, 8, 2),          # 170 regs,  96 KiB
        Tile(64, 64, 4, 3),           # 255 regs, 128 KiB
    ),
    ("dq", 256, False): _DQ_256,
    ("dq", 256, True): _DQ_256,
}

# Tiles tried for the candidate lists that spill on sm_90a (bytes spilled, stores+loads), kept out
# of the tuning unless scripts/triton_tune.py is given --include-spilling.
KNOWN_SPILLING: dict[tuple[str, int, bool], dict[Tile, str]] = {
    ("fwd", 64, False): {Tile(128, 128, 4, 3): "8+8"},
    ("fwd", 64, True): {Tile(128, 128, 4, 3): "40+88"},
    ("fwd", 128, False): {Tile(128, 64, 4, 3): "100+124", Tile(64, 128, 4, 2): "96+284"},
    ("fwd", 128, True): {Tile(128, 128, 8, 2): "16+16", Tile(128, 128, 8, 3): "16+16",
                         Tile(128, 128, 8, 2, 64): "4+4", Tile(128, 128, 8, 3, 64): "8+8",
                         Tile(128, 128, 8, 2, 32): "4+4", Tile(128, 128, 8, 3, 32): "4+4",
                         Tile(128, 64, 4, 3): "596+852"},
    ("fwd", 256, False): {Tile(64, 64, 4, 2): "100+236"},
    ("fwd", 256, True): {Tile(128, 64, 8, 2): "20+20", Tile(64, 64, 4, 2): "144+268"},
    ("dkdv", 64, False): {Tile(64, 64, 4, 2): "24+24", Tile(32, 128, 4, 2): "232+236"},
    ("dkdv", 64, True): {Tile(64, 64, 4, 2): "4+4", Tile(64, 128, 8, 2): "4+8",
                         Tile(32, 128, 4, 2): "184+212"},
    ("dkdv", 128, False): {Tile(32, 64, 4, 2): "100+100", Tile(64, 64, 8, 2): "76+80",
                           Tile(64, 64, 4, 2): "480+640", Tile(32, 128, 4, 2): "1996+1840",
                           Tile(64, 128, 8, 2): "136+156", Tile(16, 64, 4, 2): "40+40"},
    ("dkdv", 128, True): {Tile(32, 64, 4, 2): "108+108", Tile(64, 64, 8, 2): "36+36",
                          Tile(32, 64, 8, 3): "28+32", Tile(32, 128, 4, 2): "2068+1964",
                          Tile(16, 64, 4, 2): "32+32"},
    # wgmma tiles of dK/dV at head_dim 256 (keys >= 64 a program) all spill; 64 rows x 32 keys
    # runs on mma.sync and spills too.
    ("dkdv", 256, False): {Tile(16, 64, 8, 2): "16+16", Tile(16, 64, 8, 1): "480+484",
                           Tile(32, 64, 8, 2): "156+148", Tile(64, 32, 8, 2): "60+60"},
    ("dkdv", 256, True): {Tile(16, 64, 8, 2): "8+8", Tile(16, 64, 8, 1): "480+508",
                          Tile(32, 64, 8, 2): "132+128", Tile(64, 32, 8, 2): "28+28"},
    ("dq", 128, False): {Tile(128, 128, 8, 2): "8+12", Tile(64, 128, 4, 2): "168+404"},
    ("dq", 128, True): {Tile(128, 128, 8, 2): "180+376", Tile(64, 64, 4, 2): "12+12"},
    ("dq", 256, False): {Tile(128, 64, 8, 2): "8+8", Tile(64, 32, 4, 2): "104+112"},
    ("dq", 256, True): {Tile(128, 64, 8, 2): "56+136", Tile(64, 32, 4, 2): "116+144"},
}


def tune_candidates(pass_: str, head_dim: int, causal: bool,
                    include_spilling: bool = False) -> list[Tile]:
    """The production tile of one (pass, head_dim, causal) cell first, then its candidates."""
    key = (pass_, *_table_key(head_dim, causal))
    if pass_ == "fwd":
        default = forward_config(head_dim, causal)
    else:
        default = getattr(backward_config(head_dim, causal), pass_)
    tiles = [default, *TUNE_CANDIDATES[key]]
    if include_spilling:
        tiles += list(KNOWN_SPILLING.get(key, {}))
    return tiles
