"""The portable Triton kernels' production configs compile for sm_90a (H100/H200) on the CPU with no
register spills and within the shared memory of one SM.

Each problem class (head_dim x dtype x causal) compiles four kernels: forward, backward preprocess,
dK/dV and dQ, with the configs of fusedattn/kernels/triton_configs.py. Compilation runs in
subprocesses without TRITON_INTERPRET (under the interpreter nothing is compiled), two at a time.

CI subset: the whole matrix (head_dim 64/96/128/256 x fp16/bf16 x causal or not: 16 classes, 64
kernels) took 52 s on two cores with a cold Triton cache; six classes that cover every table
entry, both dtypes and both mask modes take 21 s and run by default, the other ten carry the
``slow`` marker (``pytest -m slow`` runs them). fp16 and bf16 compiled to the same shared memory
and to register counts within two of each other in every class, so the subset loses little.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusedattn.kernels.triton_common import SM90_SHARED_MEMORY_LIMIT
from fusedattn.kernels.triton_configs import BACKWARD, FORWARD, head_dim_block

REPO = Path(__file__).resolve().parents[1]
HEAD_DIMS = (64, 96, 128, 256)
ALL_CASES = [(d, dtype, causal) for d in HEAD_DIMS for dtype in ("float16", "bfloat16")
             for causal in (False, True)]
CI_CASES = [(64, "bfloat16", True), (96, "float16", False), (128, "bfloat16", True),
            (128, "float16", False), (256, "bfloat16", False), (256, "float16", True)]
SLOW_CASES = [c for c in ALL_CASES if c not in CI_CASES]
KERNELS = {"attn_fwd", "attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq"}

_SCRIPT = """
import dataclasses, json, sys, torch
from fusedattn.kernels.triton_common import sm90_reports
for head_dim, dtype, causal in json.loads(sys.argv[1]):
    for report in sm90_reports(head_dim, getattr(torch, dtype), causal):
        print(json.dumps([head_dim, dtype, causal, dataclasses.asdict(report)]), flush=True)
"""

_reports: dict[tuple, list[dict]] = {}


def _compile(cases, workers=2):
    """Compile every case not yet compiled, in ``workers`` parallel subprocesses."""
    todo = [c for c in cases if c not in _reports]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT, json.dumps(todo[i::workers])],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for i in range(workers) if todo[i::workers]]
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, f"sm_90a compilation failed:\n{err[-4000:]}"
        for line in out.splitlines():
            head_dim, dtype, causal, report = json.loads(line)
            _reports.setdefault((head_dim, dtype, causal), []).append(report)


def _case_id(case):
    d, dtype, causal = case
    return f"d{d}-{dtype}-{'causal' if causal else 'full'}"


@pytest.mark.parametrize("case", CI_CASES + [pytest.param(c, marks=pytest.mark.slow)
                                             for c in SLOW_CASES], ids=_case_id)
def test_production_config_fits_sm90(case):
    _compile(CI_CASES if case in CI_CASES else SLOW_CASES)
    reports = {r["name"]: r for r in _reports[case]}
    assert set(reports) == KERNELS
    for name, r in reports.items():
        summary = f"{name} {_case_id(case)}: {r}"
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, f"register spills: {summary}"
        assert r["shared"] <= SM90_SHARED_MEMORY_LIMIT, f"too much shared memory: {summary}"
    # The matrix products of the forward and of dQ run on Hopper's warpgroup MMA (wgmma).
    assert reports["attn_fwd"]["uses_wgmma"] and reports["attn_bwd_dq"]["uses_wgmma"]


def test_cases_cover_every_table_entry():
    buckets = {max(64, head_dim_block(d)) for d in HEAD_DIMS}
    assert {d for d, _ in FORWARD} == buckets and {d for d, _ in BACKWARD} == buckets
    assert {max(64, head_dim_block(d)) for d, _, _ in CI_CASES} == buckets
