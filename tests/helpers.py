"""Shared test helpers: error measures and the pass rule against the float64 oracle."""

from __future__ import annotations

import torch

from fusedattn.reference import attention_oracle, causal_visible


def plain_pytorch_attention(q, k, v, causal=False, softmax_scale=None):
    """Attention in plain PyTorch in the inputs' own dtype: the yardstick of honest rounding error.

    Matrix products and the softmax run in q's dtype (as a user writing it by hand would get);
    materialises the scores, so it is for tests only. Returns (out, lse_float32).
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    kk = k.repeat_interleave(h // hk, dim=2)
    vv = v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        s = s.masked_fill(~causal_visible(sq, sk, device=q.device), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv), lse


def max_err(x, ref):
    return (x.double() - ref.double()).abs().max().item() if x.numel() else 0.0


def assert_close_to_oracle(name, got, ours_ref, oracle, factor=2.0, floor=1e-3):
    """got's error vs the float64 oracle must be <= factor * (plain PyTorch's error) + floor."""
    assert not torch.isnan(got).any(), f"{name}: NaN in output"
    err = max_err(got, oracle)
    base = max_err(ours_ref, oracle)
    limit = factor * base + floor
    assert err <= limit, f"{name}: error {err:.3e} > {factor} x plain-PyTorch error {base:.3e} + {floor:g}"


def finite_or_zero(x):
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


__all__ = ["attention_oracle", "plain_pytorch_attention", "max_err", "assert_close_to_oracle",
           "finite_or_zero"]
