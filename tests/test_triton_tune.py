"""The tuning candidates of the Triton kernels (TUNE_CANDIDATES in
fusedattn/kernels/triton_configs.py, timed by scripts/triton_tune.py) compile for sm_90a with no
register spill and within one SM's shared memory, on the CPU.

With a cold Triton cache on two cores, two cells per pass (head_dim 128 causal and head_dim 256
non-causal: 25 tiles) took 31 s and run by default; the other 60 tiles and a CPU dry run of the
tuning script took 88 s and carry the ``slow`` marker. Tiles tried and found spilling are listed
in KNOWN_SPILLING and kept out of the tuning.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusedattn.kernels.triton_common import SM90_SHARED_MEMORY_LIMIT
from fusedattn.kernels.triton_configs import (BACKWARD, FORWARD, KNOWN_SPILLING, TUNE_CANDIDATES,
                                              TUNE_PASSES, tune_candidates)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "triton_tune.py"
BUCKETS = (64, 128, 256)
CELLS = list(itertools.product(TUNE_PASSES, BUCKETS, (False, True)))
CI_CELLS = [(p, d, c) for p in TUNE_PASSES for d, c in ((128, True), (256, False))]
MAX_PER_CELL = 6  # the device run's budget: ~6 candidates a cell


def _tune_module():
    spec = importlib.util.spec_from_file_location("triton_tune", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell_id(cell):
    p, d, causal = cell
    return f"{p}-d{d}-{'causal' if causal else 'full'}"


def test_candidate_tables():
    assert set(TUNE_CANDIDATES) == set(CELLS)
    for (p, d, causal), tiles in TUNE_CANDIDATES.items():
        default = (FORWARD[d, causal] if p == "fwd" else getattr(BACKWARD[d, causal], p))
        assert 1 <= len(tiles) <= MAX_PER_CELL, (p, d, causal)
        assert len(set(tiles)) == len(tiles) and default not in tiles, (p, d, causal)
        assert not set(tiles) & set(KNOWN_SPILLING.get((p, d, causal), {})), (p, d, causal)
        for t in tiles:
            assert t.block_n % t.masked_step == 0
            if p == "dkdv":
                assert t.block_n_masked is None, "dK/dV has no separate masked step"
        got = tune_candidates(p, d, causal)
        assert got[0] == default and got[1:] == list(tiles)
    assert set(KNOWN_SPILLING) <= set(CELLS)


_reports: dict[str, dict] = {}


def _compile(cells):
    """sm_90a reports of every candidate of ``cells`` (compiled two at a time, once)."""
    todo = [c for c in cells if _cell_id(c) not in _reports]
    if not todo:
        return
    tune = _tune_module()
    jobs = [(p, d, causal, tune.tile_key(t), False)
            for p, d, causal in todo for t in TUNE_CANDIDATES[p, d, causal]]
    reports = tune.compile_reports(jobs, workers=2)
    for c in todo:
        _reports[_cell_id(c)] = {jid: r for jid, r in reports.items()
                                 if tuple(r["job"][:3]) == c}


@pytest.mark.parametrize("cell", [c if c in CI_CELLS else pytest.param(c, marks=pytest.mark.slow)
                                  for c in CELLS], ids=_cell_id)
def test_candidates_compile_spill_free(cell):
    _compile(CI_CELLS if cell in CI_CELLS else [c for c in CELLS if c not in CI_CELLS])
    reports = _reports[_cell_id(cell)]
    assert len(reports) == len(TUNE_CANDIDATES[cell])
    for jid, r in reports.items():
        assert "error" not in r, f"{jid}: {r.get('error')}"
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, f"register spills: {jid}: {r}"
        assert r["shared"] <= SM90_SHARED_MEMORY_LIMIT, f"too much shared memory: {jid}: {r}"
        if cell[0] != "dkdv":  # dK/dV at head_dim 256 runs on mma.sync (see KNOWN_SPILLING)
            assert r["uses_wgmma"], f"no wgmma: {jid}"


@pytest.mark.slow
def test_tuning_script_dry_run(tmp_path):
    """The tuning flow end to end on the CPU (interpreter, tiny shapes): checks, timing, JSON."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--dry-run",
                           "--head-dims", "64", "--seqlens", "64", "--causal", "causal",
                           "--passes", "fwd,dq", "--workers", "2", "--budget", "200"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "triton_tune.json").read_text())
    assert result["checks"] and all(r["ok"] for r in result["checks"].values())
    (cell,) = result["cells"]
    assert set(cell["triton"]) == {"fwd", "dq"}
    assert all("ms" in r for rs in cell["triton"].values() for r in rs.values())
    assert set(result["winners"]) == {"fwd/d64/causal", "dq/d64/causal"}
