"""GPU checks of the 16-bit hopper kernel's candidates that reorder work without changing its
arithmetic, so their results must equal the row's bit for bit.

Marker ``gpu``: skipped without CUDA (tests/conftest.py); these also need sm_90.
"""
import pytest
import torch

from fusedattn.kernels import hopper_fwd as H
from fusedattn.reference import attention_oracle

from helpers import check_grid_rule, plain_pytorch_attention

pytestmark = pytest.mark.gpu

needs_sm90 = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
    reason="the hopper kernel needs an sm_90 GPU (H100/H200)")

# (batch, seqlen_q, heads, seqlen_k, kv_heads): more tiles than SMs (programs take several, in
# the dynamic scheduler's run-dependent order), ragged tails and GQA; seqlen_k < seqlen_q, whose
# causal tiles include ones with no visible key (rows of zeros, lse -inf); one query
SHAPES = [(4, 1000, 8, 1500, 2), (3, 700, 4, 300, 4), (2, 1, 2, 129, 1), (1, 4097, 4, 4097, 2)]


def _run(cfg, q, k, v, causal):
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device="cuda")
    H.forward(q, k, v, causal, q.shape[-1] ** -0.5, config=cfg, _out=out, _lse=lse)
    return out, lse


def _inputs(shape, head_dim, seed):
    b, sq, h, sk, hk = shape
    torch.manual_seed(seed)
    q = torch.randn(b, sq, h, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hk, head_dim, device="cuda", dtype=torch.bfloat16)
    return q, k, torch.randn_like(k)


def _check_bitwise(row, cand, q, k, v, causal):
    """cand's out and lse equal row's bit for bit, three launches each (outputs NaN-poisoned),
    and within the grid's rule of the float64 oracle."""
    ref_out, ref_lse = _run(row, q, k, v, causal)
    for _ in range(3):
        out, lse = _run(cand, q, k, v, causal)
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        assert torch.equal(out, ref_out)
        assert torch.equal(lse, ref_lse)
    scale = q.shape[-1] ** -0.5
    ro, rl = attention_oracle(q, k, v, causal, scale)
    plain, _ = plain_pytorch_attention(q, k, v, causal, scale)
    check_grid_rule("out", out, plain, ro, q.dtype)
    assert torch.equal(torch.isinf(lse), torch.isinf(rl))


def _check_close(row, cand, q, k, v, causal=True):
    """cand (causal unless told) within the grid's rule of the float64 oracle, lse's infinities where the
    oracle's, nothing NaN (outputs poisoned), lse within 1e-6 of row's and out within one bf16
    rounding (relative norm 2**-8), three launches."""
    d = q.shape[-1]
    ref_out, ref_lse = _run(row, q, k, v, causal)
    ro, rl = attention_oracle(q, k, v, causal, d ** -0.5)
    plain, _ = plain_pytorch_attention(q, k, v, causal, d ** -0.5)
    for _ in range(3):
        out, lse = _run(cand, q, k, v, causal)
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        check_grid_rule("out", out, plain, ro, q.dtype)
        assert torch.equal(torch.isinf(lse), torch.isinf(rl))
        fin = ~torch.isinf(lse)
        assert torch.allclose(lse[fin], ref_lse[fin], rtol=1e-6, atol=1e-6)
        rel = ((out.float() - ref_out.float()).norm() / ref_out.float().norm()).item()
        assert rel < 2.0 ** -8, rel   # at most one bf16 rounding of out apart


@needs_sm90
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["xt", "xt2"])
def test_cross_tile_bitwise_equal_to_its_row(shape, causal, variant):
    """cross_tile (session 26 candidates xt, and xt2 with two Q buffers): the next tile's first
    QK^T issued before this tile's O store. The same products, softmax and stores in another
    order: out and lse equal the row's (causal: the table's row; non-causal: xt_dyn, the same
    dynamic form without the switch) bit for bit, three launches each; and within the grid's
    rule of the float64 oracle."""
    q, k, v = _inputs(shape, 128, shape[1] + shape[3])
    row = H.get_config(128, causal) if causal else H.variant_config("xt_dyn", 128, False)
    xt = H.variant_config(variant, 128, causal)
    assert xt.cross_tile and not row.cross_tile
    _check_bitwise(row, xt, q, k, v, causal)


@needs_sm90
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("variant", ["ef", "efa", "efq"])
def test_early_fetch_bitwise_equal_to_its_row(shape, head_dim, variant):
    """early_fetch (session 27 candidates on the causal rows' dynamic scheduler): the next
    tile's id is fetched at the start of a tile (ef) or after its first K/V loads (efa; efq then
    prefetches that tile's Q rows into L2) instead of after its last K/V load. Each tile
    is computed as before, only possibly on another SM: out and lse equal the row's bit for bit,
    three launches each; and within the grid's rule of the float64 oracle."""
    q, k, v = _inputs(shape, head_dim, shape[1] + shape[3] + head_dim)
    ef = H.variant_config(variant, head_dim, True)
    # (early_fetch 2 does not go with the hdim 64 causal row's bottom_tiles: against that row
    # without it)
    row = H.get_config(head_dim, True, bottom_tiles=ef.bottom_tiles)
    assert ef.early_fetch and not row.early_fetch and row.scheduler == 1
    _check_bitwise(row, ef, q, k, v, True)


# diag_half must also refuse tiles: a last m-tile whose real rows (seqlen_q % 128 in 1..64) all
# belong to warpgroup 0 and see more than 64 keys of its last block (1050 x 1150: one such tile
# among eight half ones; 60 x 200: the only tile), and a half block fully masked for warpgroup 0
# (seqlen_k = seqlen_q + 32). (The review of session 27: with SHAPES alone every tile of two or
# more blocks takes the half path.)
DH_SHAPES = SHAPES + [(2, 1024, 4, 1024, 4), (1, 1000, 2, 1100, 1), (2, 1050, 4, 1150, 2),
                      (2, 60, 2, 200, 1), (1, 512, 2, 544, 1)]


@needs_sm90
@pytest.mark.parametrize("shape", DH_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant, head_dim, row_variant", [("dh", 128, None),
                                                           ("d64w2cdh", 64, "d64w2c")])
def test_diag_half_matches_the_oracle(shape, variant, head_dim, row_variant):
    """diag_half (session 27 candidates): warpgroup 0 drops the diagonal block's keys its rows
    cannot see, so its sums lose only exact zeros: within the grid's rule of the float64 oracle,
    lse's infinities where the oracle's, and within 1e-6 (relative) of its row (the products'
    accumulation order may differ), three launches each, causal (bottom-right, also with
    seqlen_k != seqlen_q, whose diagonal is not at a 64-key boundary)."""
    q, k, v = _inputs(shape, head_dim, shape[1] + 3 * shape[3])
    row = (H.variant_config(row_variant, head_dim, True) if row_variant
           else H.get_config(head_dim, True))
    dh = H.variant_config(variant, head_dim, True)
    assert dh.diag_half and not row.diag_half
    _check_close(row, dh, q, k, v)


# bottom_tiles: seqlen_q % block_m leaves a ragged first tile (hdim 64's 192-row tiles: 1024 ->
# a 64-row first tile whose other two warpgroups' rows all lie below 0; 1 -> one real row),
# seqlen_k != seqlen_q both ways (rows below 0 that see keys, rows that see none)
BT_SHAPES = DH_SHAPES + [(2, 1090, 4, 1000, 2), (1, 193, 2, 193, 1)]


@needs_sm90
@pytest.mark.parametrize("shape", BT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_bottom_tiles_matches_the_oracle(shape, head_dim):
    """bottom_tiles (session 28, variant bt; in the hdim 64 causal row since run 116): the
    causal m-tiles counted from seqlen_q's end, so the first may start below row 0 (the copy
    engine zero-fills those rows of Q; O's rows there are never stored, lse is masked). Within
    the grid's rule of the float64 oracle, lse's infinities where the oracle's, nothing NaN
    (outputs poisoned), and within 1e-6 of the row (each row sees the same key blocks in the
    same order; a block past a row's keys adds exact zeros), three launches each."""
    q, k, v = _inputs(shape, head_dim, 7 + shape[1] + 5 * shape[3])
    # (the hdim 64 causal row has had it since run 116: against the row before, no_bt)
    row = H.variant_config("no_bt", 64, True) if head_dim == 64 else H.get_config(head_dim, True)
    bt = H.variant_config("bt", head_dim, True)
    assert bt.bottom_tiles and not row.bottom_tiles
    _check_close(row, bt, q, k, v)


def _short_last_section(shape, head_dim):
    """An l2_section_mb for which shape's (batch, head)s fall into several L2 sections of the
    dynamic scheduler, the last one short (None if no size from 1 to 64 MB does)."""
    b, sq, h, sk, hk = shape
    for mb in range(1, 65):
        sec = H.l2_section_heads(b * h, sk, head_dim, h // hk, 2, mb)
        if sec < b * h and (b * h) % sec:
            return mb
    return None


# more (batch, head)s than a section holds, with a short last section at every head dim
SECTION_SHAPES = [(3, 1000, 4, 1500, 4), (5, 700, 4, 900, 2), (1, 4097, 6, 4097, 6)]


@needs_sm90
@pytest.mark.parametrize("shape", SECTION_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_l2_sections_bitwise_equal_to_one_section(shape, head_dim):
    """The dynamic scheduler's L2 sections (l2_section_mb; 16 MB in the causal rows since session
    29, run 122) only reorder the tiles: with sections small enough that these shapes take
    several, the last one short, out and lse equal the same row's with one section
    (l2_section_mb 0) bit for bit, three launches each; and within the grid's rule of the float64
    oracle."""
    row = H.get_config(head_dim, True)
    assert row.scheduler == 1 and row.l2_section_mb == 16
    mb = _short_last_section(shape, head_dim)
    assert mb is not None
    q, k, v = _inputs(shape, head_dim, 11 + shape[1] + shape[3] + head_dim)
    _check_bitwise(H.get_config(head_dim, True, l2_section_mb=0),
                   H.get_config(head_dim, True, l2_section_mb=mb), q, k, v, True)


# ragged_split: seqlen_q % 192 in 1..64 leaves a last m-tile of warpgroup 0's rows only (1024,
# 1000, 60, 1); 700 and 4097 leave two busy warpgroups (the row's path); seqlen_k of one or two
# key blocks leaves warpgroups 2 or 1 and 2 without blocks of the ragged tile (their partials
# m = -inf, l = 0); 8 x 32 heads of 1024: ~2 ragged tiles per program, so the hand-over's phase
# turns over
RS_SHAPES = SHAPES + [(2, 1024, 4, 1024, 4), (1, 1000, 2, 1100, 1), (2, 60, 2, 200, 1),
                      (2, 1024, 2, 100, 2), (2, 1024, 2, 200, 1), (2, 1024, 2, 1, 2),
                      (8, 1024, 32, 512, 8)]


@needs_sm90
@pytest.mark.parametrize("shape", RS_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ragged_split_matches_the_oracle(shape):
    """ragged_split (session 31 candidate on the hdim 64 non-causal row): a last m-tile whose
    rows all belong to consumer warpgroup 0 is computed by the three warpgroups, the key blocks
    split between them and their running max, sum and O merged. Within the grid's rule of the
    float64 oracle, lse's infinities where the oracle's, nothing NaN (outputs poisoned), and
    within 1e-6 (lse) and one bf16 rounding (out) of the row, three launches each."""
    q, k, v = _inputs(shape, 64, 13 + shape[1] + 7 * shape[3])
    row = H.get_config(64, False)
    rs = H.variant_config("rs", 64, False)
    assert rs.ragged_split and not row.ragged_split and rs.q_per_warpgroup
    _check_close(row, rs, q, k, v, causal=False)


def _growing_inputs(shape, head_dim, seed, dtype=torch.bfloat16):
    """Scores whose row max grows by more than 2^8 (exp2 units) from key block to key block,
    so that lazy_rescale's threshold trips again and again, on some rows only: the keys scaled
    up by 1 + 2 t for their 64-key block t, every other query row scaled down 20x (those rows
    never trip it themselves), and one query row in eight negated (its max falls, then jumps)."""
    b, sq, h, sk, hk = shape
    q, k, v = _inputs(shape, head_dim, seed)
    grow = 1.0 + 2.0 * (torch.arange(sk, device="cuda") // 64).float()
    k = (k.float() * grow[None, :, None, None]).to(dtype)
    qs = torch.ones(sq, device="cuda")
    qs[1::2] = 0.05
    qs[::8] = -1.0
    q = (q.float() * qs[None, :, None, None]).to(dtype)
    return q, k, v.to(dtype)


@needs_sm90
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant,head_dim", [("lazy", 128), ("lazy", 256), ("ohlazy", 256),
                                              ("lazy_ns", 256)])
def test_lazy_rescale_matches_the_oracle(shape, causal, variant, head_dim):
    """lazy_rescale (session 37, variant lazy): O's rescale skipped while no row of the
    warpgroup outgrows its reference max by 2^8. Random scores (the threshold trips at block 0
    only): within the grid's rule of the float64 oracle and within one bf16 rounding of the row
    (_check_close). Growing scores (_growing_inputs: it trips at many blocks, on some rows):
    within the grid's rule, lse's error against the oracle at most twice the row's (+ 1e-6 of
    its size: these lse reach ~500), its infinities where the oracle's, nothing NaN, in bf16 and
    fp16. ohlazy (session 38): the same with o_half; lazy_ns without split_loops."""
    row = H.get_config(head_dim, causal)
    lz = H.variant_config(variant, head_dim, causal)
    assert lz.lazy_rescale and not row.lazy_rescale
    q, k, v = _inputs(shape, head_dim, 11 + shape[1] + shape[3])
    _check_close(row, lz, q, k, v, causal)
    scale = head_dim ** -0.5
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = _growing_inputs(shape, head_dim, 5 + shape[1], dtype)
        ro, rl = attention_oracle(q, k, v, causal, scale)
        plain, _ = plain_pytorch_attention(q, k, v, causal, scale)
        fin = ~torch.isinf(rl)
        _, row_lse = _run(row, q, k, v, causal)
        row_err = (row_lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
        size = rl[fin].abs().max().item() if fin.any() else 0.0
        for _ in range(2):
            out, lse = _run(lz, q, k, v, causal)
            check_grid_rule("out", out, plain, ro, dtype)
            assert not torch.isnan(lse).any()
            assert torch.equal(torch.isinf(lse), torch.isinf(rl))
            if fin.any():
                err = (lse.double()[fin] - rl[fin]).abs().max().item()
                assert err <= 2 * row_err + 1e-6 * max(1.0, size), (err, row_err, size)


@needs_sm90
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("head_dim,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_q_regs_bitwise_equal_to_its_row(shape, head_dim, causal):
    """q_regs (session 38, variant qreg): each warpgroup's Q rows loaded into registers once per
    tile, the A operand of every QK^T from there instead of from shared memory. The same
    products in the same order: out and lse equal the row's bit for bit, three launches each;
    and within the grid's rule of the float64 oracle."""
    q, k, v = _inputs(shape, head_dim, 3 + shape[1] + head_dim)
    row = H.get_config(head_dim, causal)
    qr = H.variant_config("qreg", head_dim, causal)
    assert qr.q_regs and not row.q_regs
    _check_bitwise(row, qr, q, k, v, causal)
