"""Shared test helpers: error measures and the pass rule against the float64 oracle."""

from __future__ import annotations

import torch

from fusedattn.reference import attention_oracle, attention_plain


# Plain PyTorch in the inputs' dtype: the yardstick of honest rounding error (returns out, lse).
plain_pytorch_attention = attention_plain


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
