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


# Absolute floor for values that plain PyTorch gets exactly (dq at seqlen_k = 1 is exactly zero,
# since P = 1 and dP = D) while a kernel accumulating in float32 lands within float32 rounding of
# them: 1e-5 is 100x below the resolution of fp16 (and 800x below bf16's) at magnitude 1.
FP32_ACCUMULATION_FLOOR = 1e-5


def rounding_floor(ref64, dtype):
    """Twice the error of merely storing the oracle's values in dtype."""
    return 2 * max_err(ref64.to(dtype), ref64)


def check_grid_rule(name, got, plain, ref64, dtype):
    """The GPU grid's pass rule (tests/test_gpu_grid.py): no NaN, and got's max error against the
    float64 oracle at most 2 x plain PyTorch's in the same dtype + the rounding floor."""
    assert not torch.isnan(got).any(), f"{name}: NaN (unwritten or invalid output)"
    err, base = max_err(got, ref64), max_err(plain, ref64)
    limit = 2 * base + rounding_floor(ref64, dtype) + FP32_ACCUMULATION_FLOOR
    assert err <= limit, f"{name}: max error {err:.3e} > 2 x PyTorch {base:.3e} + floor ({limit:.3e})"


def finite_or_zero(x):
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


__all__ = ["attention_oracle", "plain_pytorch_attention", "max_err", "assert_close_to_oracle",
           "check_grid_rule", "rounding_floor", "finite_or_zero"]


def run_fast_launch_key_script(script: str, root: str, timeout: int = 900) -> None:
    """Run a fast-launch key check (a script printing "RESULT calls=.. keys=.. bad=..
    launched=..", with the stand-in sm_90a driver, outside the interpreter) and assert it: no key
    shared by two specialisations, keys shared by calls (so the check is not vacuous), every call
    launched through the fast path."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", script, root], cwd=root, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")][-1]
    fields = dict(kv.split("=") for kv in line.split()[1:])
    calls, keys, bad = int(fields["calls"]), int(fields["keys"]), int(fields["bad"])
    assert bad == 0, line
    assert keys < calls / 2, line   # calls do share keys: the check is not vacuous
    assert int(fields["launched"]) == calls
