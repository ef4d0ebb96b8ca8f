"""CPU checks of the hopper (Gluon) forward: compile for sm_90a with triton's bundled ptxas and assert
the structure the design needs. No GPU is used; runtime correctness is checked on the device by
scripts/hopper_dev2.py.
"""
import json
import os
import re
import subprocess
import sys

import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")

from fusedattn import inspect as finspect  # noqa: E402
from fusedattn.kernels import hopper_fwd as H  # noqa: E402
from helpers import run_fast_launch_key_script  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PTXAS = finspect._tool("ptxas")
pytestmark = pytest.mark.skipif(not os.path.exists(_PTXAS), reason="triton's bundled ptxas is missing")

CASES = [
    # (head_dim, causal, overrides); overrides may name a variant ({"variant": NAME}: hopper_fwd
    # .variant_config, i.e. the v3 base row plus that variant's switches); without one they apply
    # on top of the shipped table's row for (head_dim, causal).
    (64, False, {}),
    (128, False, {}),
    (256, False, {}),
    (64, True, {}),
    (128, True, {}),
    (256, True, {}),
    (96, True, {}),  # padded to 128
    (128, False, {"variant": "no_pp"}),  # the hdim 128 non-causal row until session 37
    # the v3 rows (the table before device run 5; verified in runs 2-4)
    (64, False, {"variant": "v3"}),
    (128, False, {"variant": "v3"}),
    (256, False, {"variant": "v3"}),
    (128, True, {"variant": "v3"}),
    (128, True, {"variant": "full"}),
    (128, False, {"variant": "v3", "overlap": False}),
    # switches added for issue #4
    (128, False, {"variant": "no_ws"}),
    (128, True, {"variant": "persistent_tma_pp_named"}),
    # v4 candidates (hopper_log.md v4)
    (128, False, {"variant": "fma"}),
    (128, True, {"variant": "persistent_tma_fma"}),
    (64, True, {"variant": "d64_3wg"}),
    (64, False, {"variant": "d64_3wg_persistent"}),
    (64, False, {"variant": "d64_3wg_n128"}),
    (64, False, {"variant": "d64_3wg_n128_ptma"}),
    (256, False, {"variant": "persistent_tma_fma"}),
    (256, True, {"variant": "split_tma"}),
    # v9 / v10 candidates (hopper_log.md): empty warpgroups skip; the next tile's Q prefetched
    (64, False, {"variant": "skip_empty"}),
    (64, True, {"variant": "skip_empty"}),
    (64, True, {"variant": "keep_empty"}),   # hdim 64 causal's row until device run 15
    (64, False, {"variant": "no_qpf"}),      # hdim 64 non-causal's row until device run 19
    (128, True, {"variant": "qpf"}),
    (128, False, {"variant": "qpf"}),
    # (on the row before mask_limit: with it, qpf at hdim 64 causal spills 16 B to the stack)
    (64, True, {"variant": "qpf", "mask_limit": False}),
    (128, False, {"variant": "persistent_tma_fma"}),
    # v5 candidates (hopper_log.md v5): dynamic longest-first scheduler, per-warpgroup bounds
    (128, True, {"variant": "pdyn_tma_fma"}),
    (256, True, {"variant": "pdyn_wgb_fma"}),
    (256, True, {"variant": "wgb_fma"}),
    (64, True, {"variant": "d64_3wg_n128_pdyn_wgb"}),
    # v6 candidates (hopper_log.md v6): O in its own shared-memory tile
    (128, True, {"variant": "pdyn_tmao_fma"}),
    (128, False, {"variant": "persistent_tmao_fma"}),
    # the causal rows of device runs 5-6 (v3 + FFMA softmax), replaced after device run 7
    (64, True, {"variant": "fma"}),
    (128, True, {"variant": "fma"}),
    (256, True, {"variant": "fma"}),
    # session 10: one half-tile O buffer at hdim 256 (o_half, device run 46); the timing
    # diagnostic on the shipped rows it serves (static and dynamic persistent loops)
    (256, False, {"variant": "o_half"}),
    (256, True, {"variant": "o_half"}),
    (128, False, {"diag_stamps": True}),
    (256, True, {"diag_stamps": True}),
    (64, True, {"diag_stamps": True}),    # three consumer warpgroups, dynamic scheduler
    (64, False, {"diag_stamps": True}),   # the same with the Q prefetch
    (128, True, {"diag_stamps": True}),   # two warpgroups with q_release_early (session 26)
    # session 11: the rows before o_half (hdim 256 non-causal) and o_buffer (hdim 64 causal,
    # three consumer warpgroups) were adopted (device run 48); o_buffer at hdim 64 non-causal
    (256, False, {"variant": "no_o_half"}),
    (64, True, {"variant": "no_o_buf3"}),
    (64, False, {"variant": "o_buf3"}),
    # session 11 candidate: FA3's key-block order (kv_reverse), device run 52
    (128, True, {"variant": "rev"}),
    (256, True, {"variant": "rev"}),
    # session 11 candidate: K / V stages released through named barriers (kv_release_nb)
    (128, True, {"variant": "nbr"}),
    (256, True, {"variant": "nbr"}),
    (128, False, {"variant": "nbr"}),
    (256, False, {"variant": "nbr"}),
    (128, True, {"variant": "nbr_rev"}),
    # session 12: the causal rows before mask_limit was adopted (device run 58)
    (64, True, {"variant": "no_mlim"}),
    (128, True, {"variant": "no_mlim"}),
    (256, True, {"variant": "no_mlim"}),
    # session 12 candidates: one 8-warp consumer partition (device run 57, not adopted)
    (128, True, {"variant": "joint"}),
    (128, False, {"variant": "joint_nbr"}),
    (128, True, {"variant": "joint_nbr"}),
    # session 12 candidates: the K / V waits as inline PTX (asm_waits; device run 63, not
    # adopted), on hdim 128's causal row (q_release_early since session 17) and on the row of
    # run 63 (without it)
    (128, True, {"variant": "joint_aw"}),
    (128, True, {"variant": "aw"}),
    (128, True, {"variant": "nbr"}),
    (128, True, {"variant": "aw", "q_release_early": False}),
    (128, True, {"variant": "nbr", "q_release_early": False}),
    # session 13: Q released after each warpgroup's last QK^T (q_release_early), adopted in the
    # hdim 64 causal row (device run 66); the row before it, and the candidate at hdim 64
    # non-causal and hdim 128 (causal: 0 spills since session 14)
    (64, True, {"variant": "no_qrel"}),
    (64, False, {"variant": "qrel"}),
    (128, False, {"variant": "qrel"}),
    # (the hdim 128 causal row since session 17, after device run 79: the row before it)
    (128, True, {"variant": "no_qrel"}),
    # session 13 candidates, not yet run on a GPU: per-warpgroup Q boxes and barriers
    (64, True, {"variant": "qw"}),
    (64, True, {"variant": "qw3"}),
    (64, False, {"variant": "qw"}),
    # session 14: qw3 adopted in the hdim 64 non-causal row (device run 71); the row before it;
    # then skip_empty joined that row (device run 74): qw3 is the row of runs 72-73
    (64, False, {"variant": "no_qw"}),
    (64, False, {"variant": "qw3"}),
    # session 14 candidate, not yet run on a GPU: per-warpgroup Q with 4 K / V stages
    (64, True, {"variant": "qw4"}),
    # session 25 candidate, not yet run on a GPU: one score in 8 through the polynomial exp2
    (64, False, {"variant": "ep8"}),
    (64, True, {"variant": "ep8"}),
    # session 25 candidate, not yet run on a GPU: the rows' max and sum as trees in the thread
    (64, False, {"variant": "rt"}),
    (64, True, {"variant": "rtm"}),       # the max's tree alone (rt spills 8 B here)
    # session 26 candidates (device runs 104-105: bitwise the row's, slower; not adopted): the
    # tile boundary pipelined (cross_tile), on hdim 128's causal row and, non-causal, on its
    # dynamic form (xt_dyn, the control)
    (128, True, {"variant": "xt"}),
    (128, False, {"variant": "xt"}),
    (128, False, {"variant": "xt_dyn"}),
    (128, True, {"variant": "xt2"}),      # with two Q buffers (cross_tile 2)
    (128, False, {"variant": "xt2"}),
    # session 27 candidate: the next tile's id fetched at a tile's start (early_fetch), on the
    # causal rows (the dynamic scheduler's), and with the producer's stamps
    (64, True, {"variant": "ef"}),
    (128, True, {"variant": "ef"}),
    (256, True, {"variant": "ef"}),
    (128, True, {"variant": "ef", "diag_stamps": True}),
    (64, True, {"variant": "efa"}),       # the fetch after the tile's first K/V loads
    (128, True, {"variant": "efa"}),
    (256, True, {"variant": "efa"}),
    (64, True, {"variant": "efa", "diag_stamps": True}),
    # session 27 candidate: warpgroup 0's diagonal block on its first 64 keys (diag_half)
    (128, True, {"variant": "dh"}),
    (64, True, {"variant": "d64w2cdh"}),
    (128, True, {"variant": "dh", "diag_stamps": True}),
    (64, True, {"variant": "efq"}),       # and the next tile's Q prefetched into L2 (at hdim
                                          # 128 / 256 its producer spills: 32 B / 48 B of stack)
    # session 27: hdim 64 causal on 128-row tiles with two consumer warpgroups (run 111: the
    # grid passed with it as the table's row up to seqlen 1024; not adopted)
    (64, True, {"variant": "d64w2c"}),
    # session 28 candidate: the causal m-tiles aligned to seqlen_q's end (bottom_tiles)
    (64, True, {"variant": "bt"}),
    (64, True, {"variant": "no_bt"}),     # the hdim 64 causal row before it
    (128, True, {"variant": "bt"}),
    (256, True, {"variant": "bt"}),
    (64, True, {"variant": "bt", "diag_stamps": True}),
    # session 31 candidate: hdim 64 non-causal's ragged m-tile split over the three warpgroups
    # by key block and merged (ragged_split), and with the stamps
    (64, False, {"variant": "rs"}),
    (64, False, {"variant": "rs", "diag_stamps": True}),
    # session 38 candidate: Q in registers (q_regs, variant qreg; device run 137). The hdim 128
    # causal row spills 24 B with it, so no case there
    (64, False, {"variant": "qreg"}),
    (64, True, {"variant": "qreg"}),
    (128, False, {"variant": "qreg"}),
    # lazy_rescale on the hdim 256 non-causal row without split_loops: the form of it that does
    # not spill (lazy on the row spills 60 B)
    (256, False, {"variant": "lazy_ns"}),
]

# SASS instruction digests (inspect.sass_digest) of configurations that passed the GPU test grid on
# an H200, with triton 3.6.0's bundled ptxas: a change to the kernel source that alters the code of
# a verified configuration fails here until the GPU run is repeated.
VERIFIED_SASS = {
    # v3 rows: runs 2-4 (benchmarks/hopper_log.md, RESULTS.md)
    (64, False, (("variant", "v3"),)): "356eec805752a34d7bb659293ddcc98ecca38a49",
    (128, False, (("variant", "v3"),)): "11c561194241e81b95abcb08263f05ed24d38a37",
    (256, False, (("variant", "v3"),)): "58ade058aff714615a221cf04f58979fbf489e1d",
    (128, True, (("variant", "v3"),)): "05729e31c85eead490d7d1e5458ecc8d1b16f553",
    # the non-causal rows of device runs 5-10 (hdim 64 / 128 now variants d64_3wg_n128 /
    # persistent_tma_fma); GPU grid passed in device run 6 (RESULTS.md)
    (64, False, (("variant", "d64_3wg_n128"),)): "1521990f405bc875bc3fb4dd55de2a42fd865df3",
    (128, False, (("variant", "persistent_tma_fma"),)): "79711b954030bcfca2292d3796e16febe383562f",
    (256, False, (("variant", "persistent_tma_fma"),)): "daa4959601bb7f44c052589761ea2332d390a1bf",
    # rows adopted after device run 11; GPU grid passed in device run 12 (RESULTS.md)
    (64, False, (("variant", "d64_3wg_n128_ptma"),)): "920a56d5be8bf9093bc69a107a4c4d4802f2cbcf",
    # (the hdim 128 non-causal row until session 37, now variant no_pp)
    (128, False, (("variant", "no_pp"),)): "0dfdbec3b077a31390f1a6bdefbd6f3ee631166f",
    # the table after device run 13 (split loops at hdim 64 / 256, TMA store at 256 causal;
    # batch * heads as a kernel argument of the dynamic scheduler, which changed every causal
    # row's code): GPU grid in device run 14 (RESULTS.md)
    (64, False, (("variant", "no_qpf"),)): "18336633b7a15d8d23254fde75ccb6f318ac3e5d",
    # hdim 64 non-causal with the Q prefetch (compile-time buffer indices): GPU grid (head dims
    # 40 / 64) passed in device run 21 (the row until session 14, now variant no_qw)
    (64, False, (("variant", "no_qw"),)): "6b305f5cd9fdec815bd9fcc8adba2226c182e0c3",
    # hdim 256 non-causal's row until session 11 (now variant no_o_half)
    (256, False, (("variant", "no_o_half"),)): "8d0408b41a761d85b862c7b5a65dae7491b53587",
    (64, True, (("variant", "keep_empty"),)): "480c4bbb1651f263f242cdd730a84d428014893f",
    # adopted after device run 15 (skip_empty at hdim 64 causal; its smoke checks passed there)
    # (hdim 64 causal's row until session 11, now variant no_o_buf3)
    (64, True, (("variant", "no_o_buf3"),)): "9ec563440bcc36d6baf19d9363cef7984b76666a",
    # (the causal rows until session 12, now variant no_mlim)
    (128, True, (("variant", "no_mlim"),)): "ebcdac45fce5af27ef1be03c87af1072ea59c183",
    (256, True, (("variant", "no_mlim"),)): "d0f22634da19154db01ce6afcf9f645454e86fcd",
    # the causal rows of runs 5-6 (now variant "fma"); GPU grid passed in device run 6
    (64, True, (("variant", "fma"),)): "f97bf81590f99dc114f80c5094727336d766097e",
    (128, True, (("variant", "fma"),)): "8e3eedc190fb1a157e2268b2cbc21e30a9c7d4bc",
    (256, True, (("variant", "fma"),)): "647e2dcba2bf90b0ddbf24d4ab5482588d407487",
    # session 11's adoptions (device run 48): o_half at hdim 256 non-causal, o_buffer at hdim 64
    # causal; GPU grid, memcheck and racecheck in device run 49 (RESULTS.md)
    (256, False, ()): "8c8378709aa9d229a02a1001a88458843acdd3d2",
    (64, True, (("variant", "no_mlim"),)): "5dfbe2241c3025ce383aaa31e8c81853a4570b2f",
    # session 12: mask_limit in the causal rows (device run 58); GPU grid 776 passed, memcheck 0,
    # racecheck on the work item and hand-off bytes only, in device run 59 (RESULTS.md)
    (64, True, (("variant", "no_qrel"),)): "5f060895f1839883b5d9595ad7feb2a07219a198",
    # (the hdim 128 causal row until session 17, now variant no_qrel)
    (128, True, (("variant", "no_qrel"),)): "1f0fc6f83c8f9e797dabf348d985034c7116f755",
    (256, True, ()): "a46c264c613cc9fb0659090080d066a5aafb32e2",
    # session 13: q_release_early in the hdim 64 causal row (device run 66); GPU grid 775 passed
    # and 1 failed out of memory (12 workers; it passed alone in run 69), memcheck 0, racecheck
    # on the work item and hand-off bytes only, in device run 68 (RESULTS.md)
    # (the row of runs 68-114, now variant no_bt)
    (64, True, (("variant", "no_bt"),)): "0787476653ddb39beab8f91c95d90f8e2da3e034",
    # session 28: bottom_tiles in the hdim 64 causal row (variant bt, device run 115); GPU grid,
    # memcheck and racecheck in device run 116 (RESULTS.md)
    (64, True, ()): "24634b6e226547f1c61e984eacb3ca85b8fd9922",
    # session 14: q_per_warpgroup with 3 K / V stages in the hdim 64 non-causal row (variant
    # qw3, device run 71); GPU grid 775 passed and 1 failed out of memory (an hdim 256 case, as
    # in run 68), memcheck 0, synccheck 0, racecheck on the three work-item slots and the
    # hand-off bytes only, in device run 72 (RESULTS.md)
    # (the row of runs 72-73, now variant qw3)
    (64, False, (("variant", "qw3"),)): "b195aec11507a7b582862f8af03af2cae202c612",
    # skip_empty joined the hdim 64 non-causal row (device run 74); GPU grid 776 passed, memcheck
    # 0, synccheck 0, racecheck on the three work-item slots and the hand-off bytes only, in
    # device runs 75-76 (RESULTS.md)
    (64, False, ()): "583d1c0f50743c55115b0cfc0f6b62ef89666282",
    # session 19: q_release_early in the hdim 128 causal row (variant qrel, device run 79); GPU
    # grid 776 passed, memcheck 0, racecheck on the work item and hand-off bytes only (the same
    # 20 addresses as the previous row, variant no_qrel, on the same shape), device runs 82-83
    # on an H100 (RESULTS.md)
    (128, True, ()): "6ad8715681083725ee4d066fca1636fcffb1caed",
    # session 37: pingpong (FA3's placement, named barriers; variant pp2, device runs 129 and
    # 132) in the hdim 128 non-causal row; GPU grid 782 passed, memcheck 0, synccheck 0 in
    # device run 134 on an H100 (RESULTS.md; racecheck not run on it)
    (128, False, ()): "de6f0d5f72ceacef900b890faca140fd5fcab05a",
    # (the causal rows of device runs 7-12 used the dynamic scheduler, whose code changed with
    # the batch * heads argument after run 13: their digests are no longer pinned)
}

# The compile runs in a subprocess: conftest.py turns on TRITON_INTERPRET for the CPU tests, and a
# Gluon kernel imported under the interpreter cannot be compiled.
_SCRIPT = """
import json, re, sys
from fusedattn import inspect as fi
out = []
first = int(sys.argv[2])
for d, c, ov in json.loads(sys.argv[1]):
    r = fi.report(d, c, "bf16", **ov)
    k, sass = r.pop("_kernel"), r.pop("_sass")
    ptx = k.asm["ptx"]
    r["ptx_store_tma"] = ptx.count("cp.async.bulk.tensor.4d.global.shared")
    r["ptx_named_bars"] = ptx.count("bar.sync 10, 256") + ptx.count("bar.sync 11, 256")
    r["ptx_atom_add"] = ptx.count("atom.global.gpu.acq_rel.add")
    r["ptx_clock64"] = ptx.count("%clock64")
    r["ptx_atom_exch"] = ptx.count("atom.global.gpu.acq_rel.exch")
    r["ptx_wg_bar_syncs"] = len(re.findall(r"bar\\.sync\\s+\\d+, 128;", ptx))
    r["ptx_nb_arrive_288"] = len(re.findall(r"bar\\.arrive\\s+%r\\d+, 288;", ptx))
    r["ptx_nb_sync_288"] = len(re.findall(r"bar\\.sync\\s+%r\\d+, 288;", ptx))
    r["sass_n"] = len(fi.sass_instructions(sass))
    r["ptx_asm_waits"] = ptx.count("mov.b32 A1, global_smem")
    if r["config"]["asm_waits"]:
        from fusedattn.kernels import hopper_fwd as H
        r["barrier_offsets"] = list(H._barrier_offsets(k.asm["ttgir"]))
        # the constant added to global_smem's offset in the register each inline wait adds
        adds = dict(re.findall(r"add\\.s32\\s+(%r\\d+), %r\\d+, (\\d+);", ptx))
        r["asm_wait_offsets"] = sorted({int(adds[x]) for x in re.findall(
            r"add\\.s32 A1, A1, (%r\\d+);", ptx) if x in adds})
    r["ptx_bar_sync_256"] = len(re.findall(r"bar\\.sync\\s+0, 256;", ptx))
    r["ptx_mbar_arrive"] = len(re.findall(r"mbarrier\\.arrive", ptx))
    r["ptx_mbar_init"] = len(re.findall(r"mbarrier\\.init", ptx))
    r["sass_mufu_ex2"] = len(re.findall(r"\\bMUFU\\.EX2\\b", sass))
    r["fmnmx_chain"] = fi.dependent_chain(sass, "FMNMX")
    r["fadd_chain"] = fi.dependent_chain(sass, "FADD")
    r["ptx_ex2"] = len(re.findall(r"\\bex2\\.approx", ptx))
    r["sass_ffma"] = sass.count(" FFMA")
    r["sass_fadd"] = sass.count(" FADD")
    r["sass_hgmma_shapes"] = re.findall(r"HGMMA\\.(\\d+x\\d+)x16", sass)
    # HGMMAs whose A operand comes from registers (RS): "HGMMA.<shape> Rd, Ra, gdesc[...]"
    r["sass_hgmma_rs"] = len(re.findall(r"HGMMA\\.\\S+ R\\d+, R\\d+, gdesc", sass))
    r["_case"] = first + len(out)
    out.append(r)
print("REPORTS=" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def reports():
    # the cases in two halves, compiled by two processes at once (CI has two cores; one process
    # took ~14 minutes for all of them)
    env = _compile_env()
    half = (len(CASES) + 1) // 2
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT, json.dumps(CASES[a:a + half]),
                               str(a)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for a in (0, half)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1500)
        assert p.returncode == 0, stderr[-3000:]
        line = [ln for ln in stdout.splitlines() if ln.startswith("REPORTS=")][-1]
        out += json.loads(line[len("REPORTS="):])
    assert [r["_case"] for r in out] == list(range(len(CASES)))
    return out


def _by_case(reports):
    """The reports by (head_dim, causal, the case's overrides as sorted JSON)."""
    return {(r["head_dim"], r["causal"], json.dumps(CASES[r["_case"]][2], sort_keys=True)): r
            for r in reports}


def _compile_env():
    """The environment of a subprocess that compiles kernels: the project on the path and no
    TRITON_INTERPRET (which tests/conftest.py sets without a GPU, and under which an uncached
    Gluon kernel does not compile)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(params=range(len(CASES)), ids=[
    f"d{d}-{'causal' if c else 'full'}-" + ("_".join(
        str(v) if k == "variant" else f"{k}{int(v)}" for k, v in ov.items()) or "table")
    for d, c, ov in CASES])
def report(request, reports):
    return reports[request.param]


def test_targets_sm90a(report):
    assert report["target_sm_90a"]
    assert report["ptxas_ok"]


def test_default_path_is_the_verified_code(report):
    key = (report["head_dim"], report["causal"],
           tuple(sorted((k, v) for k, v in CASES[report["_case"]][2].items())))
    want = VERIFIED_SASS.get(key)
    if want is None:
        pytest.skip("no verified digest recorded for this configuration")
    assert report["sass_sha1"] == want, "the verified default code path changed"


def test_warp_specialised_register_split(report):
    if not report["config"]["warp_specialize"]:
        # the non-specialised ablation kernel: 2 warpgroups, no producer, no setmaxnreg
        assert report["threads"] == 256
        assert report["setmaxnreg_values"] == []
        assert report["sass_counts"]["USETMAXREG"] == 0
        return
    # two (or three) consumer warpgroups + one producer warp (padded to a warpgroup);
    # num_consumers 1: one partition of two consumer warpgroups
    wgs = 2 if report["config"]["num_consumers"] == 1 else report["config"]["num_consumers"]
    assert report["threads"] == 128 * (wgs + 1)
    assert report["maxnreg_at_entry"] * report["threads"] <= 65536
    assert report["producer_regs"] in report["setmaxnreg_dec"], report["setmaxnreg_values"]
    assert report["consumer_regs"] in report["setmaxnreg_values"], report["setmaxnreg_values"]
    assert report["producer_regs"] == 24
    assert not report["c7508_setmaxnreg_ignored"]
    assert report["sass_counts"]["USETMAXREG"] > 0


def test_wgmma_tma_mbarrier_present(report):
    ptx = report["ptx_counts"]
    assert ptx["wgmma.mma_async"] > 0
    assert ptx["cp.async.bulk.tensor"] > 0
    assert ptx["mbarrier.try_wait"] > 0
    assert report["sass_counts"]["HGMMA"] > 0


def test_no_spills(report):
    assert report["stack"] == 0
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0
    assert report["ptx_counts"]["ld.local"] == 0 and report["ptx_counts"]["st.local"] == 0


def test_shared_memory_fits(report):
    assert report["shared_bytes"] <= 227 * 1024
    cfg = H.FwdConfig(**report["config"])
    assert report["shared_bytes"] >= H.shared_memory_bytes(report["head_dim"], cfg)
    if cfg.tma_store:
        # the tiles are all of it but the barriers, the work item and alignment (324-508 B in
        # session 11's rows; q_prefetch's second Q buffer was missing from the count until then)
        assert report["shared_bytes"] - H.shared_memory_bytes(report["head_dim"], cfg) < 1024


def test_new_switches_reach_the_code(report):
    cfg = report["config"]
    assert (report["ptx_store_tma"] > 0) == cfg["tma_store"]
    named = cfg["pingpong"] and cfg["pingpong_mode"] == 2
    assert (report["ptx_named_bars"] > 0) == named
    if cfg["tma_store"]:
        assert report["sass_counts"]["UTMASTG"] > 0


def test_dynamic_scheduler_reaches_the_code(report):
    """scheduler 1: one atomic add (the next tile) and one exchange (the counter's reset) in the
    producer; no atomics anywhere else. (early_fetch 2 has two add sites, one executed per tile:
    in the K/V loop, or after it for a tile of at most num_stages blocks.)"""
    cfg = report["config"]
    dyn = cfg["persistent"] and cfg["scheduler"] == 1
    assert report["ptx_atom_add"] == ((2 if cfg["early_fetch"] == 2 else 1) if dyn else 0)
    assert report["ptx_atom_exch"] == (1 if dyn else 0)


def test_wg_bounds_is_new_code(reports):
    """wg_bounds changes the causal kernel (it is not the v3 + FFMA row under another name) and
    keeps its GEMMs (the table's rows are pinned by their digests above)."""
    by_case = _by_case(reports)
    wgb = by_case[(256, True, json.dumps({"variant": "wgb_fma"}))]
    base = by_case[(256, True, json.dumps({"variant": "fma"}))]  # v3 + softmax_fma, without it
    assert wgb["sass_sha1"] != base["sass_sha1"]
    assert wgb["sass_counts"]["HGMMA"] == base["sass_counts"]["HGMMA"]


def test_o_half_is_new_code(reports):
    """o_half (hdim 256): the row's GEMMs, one more half-tile of shared memory, O stored with
    TMA, and a different kernel from the row."""
    by_case = _by_case(reports)
    for causal in (False, True):
        oh = by_case[(256, causal, json.dumps({"variant": "o_half"}))]
        # the row without it (the non-causal row has it since session 11)
        row = by_case[(256, causal, json.dumps({"variant": "no_o_half"} if not causal else {}))]
        assert H.get_config(256, causal).o_half == (not causal)
        assert oh["sass_sha1"] != row["sass_sha1"]
        assert oh["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        half = H.variant_config("o_half", 256, causal).block_m // 2 * 256 * 2   # bytes, bf16
        # (the allocator aligns: a few bytes more than the buffer itself)
        assert half <= oh["shared_bytes"] - row["shared_bytes"] < half + 256


def test_kv_reverse_is_new_code(reports):
    """kv_reverse (session 11): the same GEMMs and shared memory as the rows it modifies, a
    different kernel, no spills; refused where the kernel does not implement it."""
    by_case = _by_case(reports)
    for d in (128, 256):
        rev = by_case[(d, True, json.dumps({"variant": "rev"}))]
        assert rev["config"]["kv_reverse"] and rev["spill_stores"] == 0
        assert rev["sass_sha1"] != by_case[(d, True, json.dumps({}))]["sass_sha1"]
        assert rev["shared_bytes"] == by_case[(d, True, json.dumps({}))]["shared_bytes"]
    # hdim 128 causal's row has one loop over every block; rev has the same overlapped step
    # in two loops (masked, unmasked) instead of one with the mask chosen at run time
    assert H._qpf_diag_bits(H.variant_config("rev", 128, True)) == 32
    _assert_refused("kv_reverse", dict(split_loops=True), dict(scheduler=0))


def _assert_refused(switch, *extra, base=None):
    """forward() and compile_sm90 refuse the hdim 128 causal row with `switch` on (and the
    switches in `base`) where the kernel does not implement it, before any kernel work."""
    import torch
    q = torch.zeros(1, 256, 2, 128, dtype=torch.bfloat16)
    for bad in (dict(overlap=False), dict(wg_bounds=True),
                dict(pingpong=True), dict(num_consumers=3, block_m=192),
                dict(q_prefetch=True, o_buffer=False), *extra):
        cfg = H.get_config(128, True, **{switch: True, **(base or {}), **bad})
        with pytest.raises(ValueError, match=switch):
            H.forward(q, q, q, True, 0.1, config=cfg)
        with pytest.raises(ValueError, match=switch):
            H.compile_sm90(128, True, config=cfg)


def test_kv_release_through_named_barriers(reports):
    """kv_release_nb (session 11): the consumers' K / V releases become bar.arrive on named
    barriers of 288 threads (two consumer warpgroups + the producer warp), the producer's waits
    bar.sync, and the warpgroup bar.sync that Gluon puts before each mbarrier.arrive go away;
    the rows have none of it. Refused where it does not apply."""
    by_case = _by_case(reports)
    for d, causal in ((128, True), (256, True), (128, False), (256, False)):
        nbr = by_case[(d, causal, json.dumps({"variant": "nbr"}))]
        row = by_case[(d, causal, json.dumps({}))]
        assert row["ptx_nb_arrive_288"] == 0 and row["ptx_nb_sync_288"] == 0
        # per consumer warpgroup: block 0's K, the loop's K and V (once per loop copy), the
        # last V; the producer: K and V in its loop and in its drain
        assert nbr["ptx_nb_arrive_288"] >= 8 and nbr["ptx_nb_sync_288"] == 4
        assert row["ptx_wg_bar_syncs"] - nbr["ptx_wg_bar_syncs"] == nbr["ptx_nb_arrive_288"]
        assert nbr["spill_stores"] == 0
        assert nbr["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
    # (hdim 128 causal's row releases Q early since session 17: bit 128)
    assert H._qpf_diag_bits(H.variant_config("nbr", 128, True)) == 64 + 128
    _assert_refused("kv_release_nb", dict(num_stages=4),
                    dict(persistent=False, o_buffer=False, scheduler=0))


def test_mask_limit_in_the_causal_rows(reports):
    """mask_limit (session 12, device run 58): the causal rows test each masked score with one
    compare against a per-row limit; fewer instructions than the rows before it (variant
    no_mlim), the same GEMMs, no spills; not in the non-causal rows; refused without
    softmax_fma."""
    by_case = _by_case(reports)
    for d in (64, 128, 256):
        # (hdim 64: the row before bottom_tiles, as no_mlim is)
        row = by_case[(d, True, json.dumps({"variant": "no_bt"} if d == 64 else {}))]
        old = by_case[(d, True, json.dumps({"variant": "no_mlim"}))]
        assert row["config"]["mask_limit"] and not old["config"]["mask_limit"]
        assert not H.get_config(d, False).mask_limit
        assert row["sass_n"] < old["sass_n"] - 150, (row["sass_n"], old["sass_n"])
        assert row["sass_counts"]["HGMMA"] == old["sass_counts"]["HGMMA"]
        assert row["spill_stores"] == 0
    with pytest.raises(ValueError, match="mask_limit"):
        H._check_switch_support(H.get_config(128, True, softmax_fma=False))


def test_one_consumer_partition(reports):
    """num_consumers 1 (session 12 candidates joint / joint_nbr, device run 57: not adopted):
    both consumer warpgroups in one 8-warp partition run one copy of the consumer code (half
    the GEMM instructions of the row, which has one copy per warpgroup), held together by
    256-thread barriers; 384 threads as the row. Refused where it does not apply."""
    by_case = _by_case(reports)
    for causal, name in ((True, "joint"), (False, "joint_nbr")):
        j = by_case[(128, causal, json.dumps({"variant": name}))]
        row = by_case[(128, causal, json.dumps({}))]
        assert j["config"]["num_consumers"] == 1 and j["threads"] == row["threads"] == 384
        assert 2 * j["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        assert j["sass_n"] < 0.6 * row["sass_n"]
        assert j["ptx_bar_sync_256"] > 0 and row["ptx_bar_sync_256"] == 0
        assert j["spill_stores"] == 0
    assert by_case[(128, False, json.dumps({"variant": "joint_nbr"}))]["ptx_nb_arrive_288"] > 0
    for bad in (dict(pingpong=True), dict(persistent=False, scheduler=0, o_buffer=False),
                dict(overlap=False), dict(q_prefetch=True, o_buffer=False)):
        with pytest.raises(ValueError, match="num_consumers 1"):
            H._check_switch_support(H.get_config(128, True, num_consumers=1, **bad))


def test_asm_waits(reports):
    """asm_waits (session 12 candidates joint_aw / aw, device run 63, not adopted): the consumers'
    K / V ready waits become inline PTX on global_smem + the offsets that Triton's own
    allocation gave k_ready / v_ready (read back from the kernel's TTGIR and used in its PTX),
    and the partition-wide barrier that Triton's membar pass puts before each wait goes: one
    fewer in the one-partition kernel (the one in its key-block loop), two fewer 128-thread ones
    in the two-partition kernel (one per loop copy). Refused where it does not apply."""
    by_case = _by_case(reports)
    jaw = by_case[(128, True, json.dumps({"variant": "joint_aw"}))]
    jnb = by_case[(128, True, json.dumps({"variant": "joint_nbr"}))]
    aw = by_case[(128, True, json.dumps({"variant": "aw"}))]
    nbr = by_case[(128, True, json.dumps({"variant": "nbr"}))]
    for r, base, copies in ((jaw, jnb, 1), (aw, nbr, 2)):
        assert r["ptx_asm_waits"] == 4 * copies and base["ptx_asm_waits"] == 0
        k_off, v_off = r["barrier_offsets"]
        assert k_off != v_off and r["asm_wait_offsets"] == sorted([k_off, v_off])
        assert r["spill_stores"] == 0
        assert r["sass_counts"]["HGMMA"] == base["sass_counts"]["HGMMA"]
    assert jaw["ptx_bar_sync_256"] == jnb["ptx_bar_sync_256"] - 1
    assert jaw["ptx_clock64"] == 0
    # One fewer per loop copy on the row of run 63. With q_release_early (hdim 128's causal row
    # since session 17) the key-block loop holds Q's release, an mbarrier.arrive, and the
    # membar pass, which cannot see into the inline wait, puts the barrier back after it
    # (before the next QK^T): the same count as nbr there (found in session 18)
    aw0, nbr0 = (by_case[(128, True, json.dumps({"variant": v, "q_release_early": False},
                                                 sort_keys=True))] for v in ("aw", "nbr"))
    assert not aw0["config"]["q_release_early"] and aw["config"]["q_release_early"]
    assert aw0["ptx_asm_waits"] == 8 and aw0["spill_stores"] == 0
    assert aw0["ptx_wg_bar_syncs"] == nbr0["ptx_wg_bar_syncs"] - 2
    assert aw["ptx_wg_bar_syncs"] == nbr["ptx_wg_bar_syncs"]
    _assert_refused("asm_waits", dict(kv_release_nb=False),
                    dict(persistent=False, o_buffer=False, scheduler=0),
                    base=dict(kv_release_nb=True))
    H._check_switch_support(H.variant_config("aw", 128, True))   # the variants themselves pass
    H._check_switch_support(H.variant_config("joint_aw", 128, True))


def test_ragged_split_refused_where_it_cannot_run():
    """ragged_split (session 31 candidate): with q_per_warpgroup's producer only, and with at
    least three K / V stages (a round of three blocks must fit the ring: with two, a warpgroup
    waits for a load that needs its own release; found in review, session 31)."""
    H._check_switch_support(H.variant_config("rs", 64, False))
    for bad in (dict(num_stages=2), dict(q_per_warpgroup=False)):
        with pytest.raises(ValueError, match="ragged_split"):
            H._check_switch_support(H.variant_config("rs", 64, False, **bad))
    with pytest.raises(ValueError, match="ragged_split"):   # the causal row has no q_per_warpgroup
        H._check_switch_support(H.variant_config("rs", 64, True))


def test_timing_stamps_reach_the_code(report):
    """diag_stamps: clock reads in the kernel exactly when it is on: 5 by consumer warpgroup 0
    and 1 by warpgroup 1 with the overlap (4 and 1 without; the two-buffer Q prefetch has two
    copies of the tile body); with q_release_early 2 more per warpgroup, its Q release (session
    26: in the loop's step and in block 0's path, a tile of one block); with the dynamic
    scheduler's one-buffer producer (_producer_dynamic) 3 more, the producer's own (session 27);
    none otherwise."""
    n = report["ptx_clock64"]
    cfg = report["config"]
    producer = 3 if (cfg["scheduler"] == 1 and not cfg["q_prefetch"] and cfg["cross_tile"] != 2
                     and not cfg["q_per_warpgroup"]) else 0
    if not cfg["diag_stamps"]:
        assert n == 0
    elif cfg["num_consumers"] == 2:   # (diag_half: one more Q-release site, its half block)
        assert n == (6 + (4 if cfg["q_release_early"] else 0) + producer
                     + (1 if cfg["diag_half"] and cfg["q_release_early"] else 0))
    else:
        assert n >= 5 + producer


def test_q_regs_takes_q_from_registers(reports):
    """q_regs (session 38, variant qreg): every QK^T takes A from registers, so every HGMMA of
    the kernel is RS (the row's QK^Ts read Q from shared memory, its P Vs P from registers); the
    same GEMMs and shared memory as the row; refused where _consumer does not run."""
    by_case = _by_case(reports)
    for d, causal in ((64, False), (64, True), (128, False)):
        qr = by_case[(d, causal, json.dumps({"variant": "qreg"}))]
        row = by_case[(d, causal, json.dumps({}))]
        assert qr["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        assert qr["sass_hgmma_rs"] == qr["sass_counts"]["HGMMA"]
        assert 0 < row["sass_hgmma_rs"] < row["sass_counts"]["HGMMA"]
        assert qr["shared_bytes"] == row["shared_bytes"]
    for bad in (dict(cross_tile=1), dict(ragged_split=True), dict(warp_specialize=False),
                dict(softmax_fma=False)):
        with pytest.raises(ValueError, match="q_regs"):
            H._check_switch_support(H.get_config(128, True, q_regs=True, **bad))


def test_new_switches_are_refused_where_they_do_not_apply():
    import torch
    q = torch.zeros(1, 256, 2, 256, dtype=torch.bfloat16)
    for bad in (dict(pingpong=True), dict(persistent=False), dict(tma_store=False),
                dict(o_buffer=True), dict(q_prefetch=True), dict(warp_specialize=False),
                dict(num_consumers=3, block_m=192)):
        cfg = H.get_config(256, True, o_half=True, **bad)
        with pytest.raises(ValueError, match="o_half"):
            H.forward(q, q, q, True, 0.1, config=cfg)
        with pytest.raises(ValueError, match="o_half"):
            H.compile_sm90(256, True, config=cfg)
    with pytest.raises(ValueError, match="_diagnostic"):
        H.forward(q, q, q, True, 0.1, config=H.get_config(256, True, diag_stamps=True))
    # a last tile of 6 rows; of 20 (the Q-release slots 8-10 need 22 rows since session 26);
    # an odd length (misaligned int64 stamps)
    for sq in (134, 148, 251):
        x = torch.zeros(1, sq, 2, 256, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="even seqlen_q"):
            H.forward(x, x, x, True, 0.1, config=H.get_config(256, True, diag_stamps=True),
                      _diagnostic=True)
    with pytest.raises(ValueError, match="diag_stamps"):   # three consumers, static schedule
        H._check_switch_support(H.get_config(128, False, diag_stamps=True, num_consumers=3,
                                             block_m=192))
    # three consumers, dynamic (the row's q_release_early is bit 128)
    # (the hdim 64 causal row: q_release_early 128, bottom_tiles 32768)
    assert H._qpf_diag_bits(H.get_config(64, True, diag_stamps=True)) == 16 + 128 + 32768
    with pytest.raises(ValueError, match="diag_stamps"):
        H.compile_sm90(128, False, config=H.get_config(128, False, diag_stamps=True,
                                                       warp_specialize=False))
    assert H._qpf_diag_bits(H.get_config(128, False, diag_stamps=True)) == 16
    assert H._tma_store_mode(H.variant_config("o_half", 256, True)) == 4
    assert H.shared_memory_bytes(256, H.variant_config("o_half", 256, False)) == \
        H.shared_memory_bytes(256, H.variant_config("no_o_half", 256, False)) + 64 * 256 * 2


def test_o_buffer_with_three_consumers(reports):
    """o_buffer on the hdim 64 rows (three consumer warpgroups, session 11): O's three boxes of
    64 rows in the second half of an 8-box buffer (64 KB of Q + O instead of 32 KB of Q), one
    TMA store per warpgroup, the same GEMMs as without it."""
    by_case = _by_case(reports)
    row = by_case[(64, True, json.dumps({}))]
    old = by_case[(64, True, json.dumps({"variant": "no_o_buf3"}))]
    assert H.get_config(64, True).o_buffer and H.get_config(64, True).num_consumers == 3
    assert row["sass_sha1"] != old["sass_sha1"]
    assert row["sass_counts"]["HGMMA"] == old["sass_counts"]["HGMMA"]
    assert row["sass_counts"]["UTMASTG"] == 3
    assert row["spill_stores"] == 0
    box = 64 * 64 * 2   # bytes of one 64-row box at head_dim 64, bf16
    assert 4 * box <= row["shared_bytes"] - old["shared_bytes"] < 4 * box + 256
    assert H.shared_memory_bytes(64, H.get_config(64, True)) == \
        H.shared_memory_bytes(64, H.variant_config("no_o_buf3", 64, True)) + 4 * box
    # on the non-causal row it replaces the Q prefetch (the two are refused together)
    nc = by_case[(64, False, json.dumps({"variant": "o_buf3"}))]
    assert nc["sass_counts"]["UTMASTG"] == 3 and nc["spill_stores"] == 0
    import torch
    q = torch.zeros(1, 256, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_prefetch"):
        H.forward(q, q, q, False, 0.1, config=H.variant_config("no_qw", 64, False, o_buffer=True))
    with pytest.raises(ValueError, match="q_prefetch"):
        H.compile_sm90(64, False, config=H.variant_config("no_qw", 64, False, o_buffer=True))
    for bad in (dict(persistent=False, scheduler=0, bottom_tiles=False), dict(tma_store=False)):
        with pytest.raises(ValueError, match="o_buffer needs"):
            H.compile_sm90(64, True, config=H.get_config(64, True, **bad))


def test_l2_section_heads():
    """FA3's L2 swizzle (hopper/tile_scheduler.hpp): the largest power of two of kv heads whose
    K and V fit in 32 MB, times the q heads per kv head, at least one kv head."""
    f = H.l2_section_heads
    assert f(256, 2048, 128, 1, 2, 32) == 32      # 1 MB of K+V per head
    assert f(32, 8192, 128, 1, 2, 32) == 8        # 4 MB
    assert f(16, 4096, 256, 1, 2, 32) == 8        # 4 MB
    assert f(16, 6000, 128, 1, 2, 32) == 8        # 2.9 MB: 11 fit -> 8
    assert f(16, 65536, 256, 1, 2, 32) == 1       # 64 MB: one head
    assert f(64, 8192, 128, 4, 2, 32) == 32       # GQA: 8 kv heads x 4 q heads each
    assert f(12, 2048, 128, 1, 2, 32) == 12       # capped at batch x heads
    assert f(256, 2048, 128, 1, 2, 0) == 256      # 0: one section
    # the causal rows' 16 MB (session 29, runs 120-122) at the bench's 1k shapes: half FA3's
    assert f(256, 1024, 128, 1, 2, 16) == 32 and f(256, 1024, 128, 1, 2, 32) == 64
    assert f(128, 1024, 256, 1, 2, 16) == 16 and f(512, 1024, 64, 1, 2, 16) == 64
    for d in H.NATIVE_HEAD_DIMS:
        assert H.get_config(d, True).l2_section_mb == 16
        assert H.variant_config("l2_32", d, True) == H.get_config(d, True, l2_section_mb=32)


def test_scheduler_needs_persistent():
    import torch
    q = torch.zeros(1, 256, 2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="persistent"):
        H.forward(q, q, q, True, 0.1, config=H.base_config(128, scheduler=1))
    with pytest.raises(ValueError, match="wg_bounds"):
        H.forward(q, q, q, True, 0.1, config=H.base_config(128, wg_bounds=True, pingpong=True))
    # (v10's Q prefetch with three consumer warpgroups under a causal mask was refused here after
    # device run 17; fixed in run 20 (compile-time Q buffer indices), GPU grid passed in run 21)


def test_exp_poly_moves_one_score_in_8_off_mufu(reports):
    """exp_poly 8 (variant ep8, session 25) on hdim 64's rows: per softmax site 64 / 8 of the
    64 exp2 per thread leave ex2 / MUFU.EX2 for the polynomial (FFMA up), the same GEMMs, no
    spills (the generic tests), a new kernel; refused without softmax_fma or with a bad k."""
    by_case = _by_case(reports)
    for causal in (False, True):
        ep, row = by_case[(64, causal, json.dumps({"variant": "ep8"}))], by_case[(64, causal, "{}")]
        assert ep["config"]["exp_poly"] == 8 and row["config"]["exp_poly"] == 0
        cut = row["ptx_ex2"] - ep["ptx_ex2"]
        assert cut > 0 and cut % 8 == 0
        assert row["sass_mufu_ex2"] - ep["sass_mufu_ex2"] == cut
        assert ep["sass_ffma"] > row["sass_ffma"]
        assert ep["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        assert ep["sass_sha1"] != row["sass_sha1"]
    with pytest.raises(ValueError, match="exp_poly"):
        H._v4_constexprs(H.get_config(64, False, exp_poly=8, softmax_fma=False))
    with pytest.raises(ValueError, match="exp_poly"):
        H._v4_constexprs(H.get_config(64, False, exp_poly=3))


def test_row_tree_folds_the_rows_in_trees(reports):
    """row_tree (session 25): 2 (variant rt, hdim 64 non-causal) the row max and sum in trees a
    few deep where the row folds chains of ~32 dependent FMNMX / FADD; 1 (rtm, hdim 64 causal)
    the max alone. The same GEMMs, a new kernel, no spills (the generic tests); refused without
    softmax_fma or with another value."""
    by_case = _by_case(reports)
    rt, row = by_case[(64, False, json.dumps({"variant": "rt"}))], by_case[(64, False, "{}")]
    assert row["fmnmx_chain"] >= 30 and row["fadd_chain"] >= 30
    assert rt["fmnmx_chain"] <= 10 and rt["fadd_chain"] <= 10
    assert rt["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
    assert rt["sass_sha1"] != row["sass_sha1"]
    rtm, crow = by_case[(64, True, json.dumps({"variant": "rtm"}))], by_case[(64, True, "{}")]
    assert crow["fmnmx_chain"] >= 30 and rtm["fmnmx_chain"] <= 10
    assert rtm["fadd_chain"] == crow["fadd_chain"] >= 30
    with pytest.raises(ValueError, match="row_tree"):
        H._v4_constexprs(H.get_config(64, False, row_tree=2, softmax_fma=False))
    with pytest.raises(ValueError, match="row_tree"):
        H._v4_constexprs(H.get_config(64, False, row_tree=3))


def test_softmax_fma_uses_ffma(reports):
    """softmax_fma: the exponent's scale-and-subtract is one FFMA (SASS), fewer FADDs than the
    table's kernel of the same head dim."""
    by_case = _by_case(reports)
    fma = by_case[(128, False, json.dumps({"variant": "fma"}))]
    base = by_case[(128, False, json.dumps({"variant": "v3"}))]
    assert fma["sass_ffma"] > base["sass_ffma"] + 256, (fma["sass_ffma"], base["sass_ffma"])
    assert fma["sass_fadd"] < base["sass_fadd"], (fma["sass_fadd"], base["sass_fadd"])


def test_three_consumer_warpgroups(reports):
    for r in reports:
        if r["config"]["num_consumers"] != 3:
            continue
        assert r["threads"] == 512 and r["maxnreg_at_entry"] == 128
        # workers 160 each, producer 24, the default partition (consumer 0) what is left: 168
        assert {24, 160, 168} <= set(r["setmaxnreg_values"]), r["setmaxnreg_values"]


def test_dev2_precompile_path_on_cpu(tmp_path):
    """scripts/hopper_dev2.py compiles its kernels first through forward(_warmup=True); here with
    a stand-in sm_90a driver (hopper_dev2.install_mock_sm90_driver) on CPU tensors: the launch path's
    specialisation and descriptors, with nothing launched."""
    env = _compile_env()
    env["HOPPER_DEV2_MOCK_DRIVER"] = "1"
    specs = [["d64_3wg", 64, True, 2, 1000, 4, 2], ["persistent_tma_fma", 128, False, 2, 8192, 16, 16],
             # v5 spec format: + seqlen_k, l2_section_mb (the dynamic scheduler's smoke case)
             ["pdyn_tma_fma", 128, True, 3, 3000, 4, 2, 3000, 6]]
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "hopper_dev2.py"),
                          str(tmp_path), "--worker", "compile:" + json.dumps(specs)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stdout.count("compiled ") == 3 and "FAILED" not in res.stdout, res.stdout
    assert "spills=0" in res.stdout.splitlines()[-1], res.stdout


_DRY_RUN = """
import json, os, random, sys, types
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
import torch, triton
import hopper_dev2 as D
from fusedattn.kernels import hopper_fwd as H
D.VERIFIED -= D.VERIFIED_RUN7  # the plumbing under test is for never-run variants
D.DEVICE = "cpu"
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(name="FAKE",
                                                                   multi_processor_count=132)
triton.testing.do_bench = lambda fn, warmup=0, rep=0, return_mode="median": (fn(), 1.0)[1]
triton.testing.do_bench_cudagraph = lambda fn, rep=0, return_mode="median": (fn(), 0.9)[1]

def fake_forward(q, k, v, causal, scale, config=None, _out=None, _lse=None, _warmup=False):
    ro, rl = D.reference(q, k, v, causal, scale)
    out = _out if _out is not None else torch.empty_like(q)
    lse = _lse if _lse is not None else torch.empty(q.shape[0], q.shape[2], q.shape[1])
    out.copy_(ro.to(q.dtype))
    lse.copy_(rl.float())
    if config is not None and config.tma_store and not config.split_loops:
        # pdyn_tma_fma (the table's row has split loops): a broken variant, caught by the
        # check, never timed
        out[0, -1] = float("nan")
    return out, lse

H.forward = fake_forward
torch.set_num_threads(1)  # the fake must repeat bit for bit (see hopper_dev2.install_fake)
D.JOBS = {"d256": (60, ["default", "pdyn_tma_fma"], [(256, True, 130)], [(256, True, 130)])}
D._cell_shape = lambda job, d, s: (1, 2)
D.worker("d256", sys.argv[1])
print("SUMMARY=" + json.dumps(D.summarize(sys.argv[1], ["d256"], {"d256": "rc=0"})))
"""


def test_dev2_worker_dry_run_on_cpu(tmp_path):
    """The device script's worker on CPU with a fake kernel (float64 reference; the
    never-run "pdyn_tma_fma" variant made wrong on purpose) and fake timers: the wrong variant is caught and not timed, the
    diagnostics and the summary run."""
    env = _compile_env()
    res = subprocess.run([sys.executable, "-c", _DRY_RUN, str(tmp_path), ROOT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    recs = [json.loads(ln) for ln in open(tmp_path / "d256.jsonl")]
    checks = {(r["variant"], r.get("shape")): r["ok"] for r in recs if r["kind"] == "check"}
    assert checks[("pdyn_tma_fma", "2x1000 h4/2")] is False
    assert all(ok for (n, _), ok in checks.items() if n == "default")
    timed = {r["impl"] for r in recs if r["kind"] == "time"}
    assert "default" in timed and "pdyn_tma_fma" not in timed
    assert any(r["kind"] == "diag" for r in recs)
    summary = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("SUMMARY=")][-1][8:])
    assert "CHECK FAILED d256 pdyn_tma_fma" in summary and "default" in summary


def test_dev2_compile_list_covers_every_job():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import hopper_dev2 as D
    specs = D.compile_specs(list(D.JOBS))
    names = {s[0] for s in specs}
    for _, variants, _, _ in D.JOBS.values():
        assert set(variants) <= names
    for n in names:
        assert n in H.VARIANTS or n in D.EXTRA_VARIANTS
    # v5: every never-run variant of the default jobs goes through the smoke stage, the dynamic
    # ones with the many-tile, two-section case (compiled too); the padded dims are compiled
    v5 = D.compile_specs(D.DEFAULT_JOBS)
    smoke = D.smoke_list(D.DEFAULT_JOBS)
    for _, variants, cells, _ in (D.JOBS[j] for j in D.DEFAULT_JOBS):
        for d, causal, _ in cells:
            for n in variants:
                assert n == "default" or n in D.VERIFIED or [n, d, causal] in smoke
    for n, d, causal in smoke:
        cfg = D._cfg(H, n, d, causal)
        assert any(s[:3] == (n, d, causal) for s in v5), (n, d, causal)
        if cfg.persistent and cfg.scheduler:
            # many tiles (> 132 SMs) in two L2 sections, the second short
            sh = [x for x in D.smoke_shapes(H, cfg, d, causal) if x[0].startswith("3x3000")]
            assert sh, (n, d)
            _, b, sq, sk, h, hk, c = sh[0]
            sec = H.l2_section_heads(b * h, sk, d, h // hk, 2, c.l2_section_mb)
            assert b * h * -(-sq // c.block_m) > 132 and b * h % sec and b * h > sec, (n, d, sec)
    assert {s[1] for s in v5 if s[0] == "default"} >= set(D.PAD_DIMS)
    assert D.DEFAULT_JOBS == ["c128", "c256", "c64", "pad"]


_SMOKE_DRY_RUN = """
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
import hopper_dev2 as D
D.VERIFIED -= D.VERIFIED_RUN7  # the plumbing under test is for never-run variants
out = sys.argv[1]
D.SMOKE_STALL_S = 8
D.JOBS["c64"] = (60, ["default", "d64_3wg_n128_pdyn_wgb", "pdyn_fma", "d64_3wg_n128_pdyn"],
                 [(64, True, 256)], [])
D.JOBS["pad"] = (60, ["default"], [(96, True, 256)], [])
D.PAD_DIMS = (32, 96)
D.PAD_SHAPES = [(1, 200, 4, 2)]
D._cell_shape = lambda job, d, s: (1, 2)
status = {"smoke": D.run_smoke(out, ["c64", "pad"], time.time() + 300)}
for j in ("c64", "pad"):
    D.worker(j, out)  # in this process (the fake from HOPPER_DEV2_FAKE), with the small cells
    status[j] = "rc=0"
print("SUMMARY=" + json.dumps(D.summarize(out, ["smoke", "c64", "pad"], status)))
# a hang in a dynamic-scheduler variant: the other dynamic variants are not risked
os.environ["HOPPER_DEV2_FAKE"] = "hang:pdyn_fma"
D.JOBS["c64"] = (60, ["default", "pdyn_fma", "d64_3wg_n128_pdyn", "d64_3wg_n128_wgb"],
                 [(64, True, 256)], [])
os.makedirs(out + "/b")
print("SMOKE2=" + D.run_smoke(out + "/b", ["c64"], time.time() + 300))
"""


def test_dev2_smoke_stage_and_pad_on_cpu(tmp_path):
    """The v5 plumbing on CPU (scripts/hopper_dev2.py install_fake: the float64 reference as the
    kernel): a variant that hangs is killed by the smoke watchdog and recorded as hung, the
    remaining variants still run; a wrong variant fails its smoke case; the jobs time only the
    variants that passed; the padded head dims are checked; the summary names both."""
    env = _compile_env()
    env["HOPPER_DEV2_FAKE"] = "hang:d64_3wg_n128_pdyn_wgb,fail:pdyn_fma"
    res = subprocess.run([sys.executable, "-c", _SMOKE_DRY_RUN, str(tmp_path), ROOT], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    smoke = {(r["variant"], r["d"]): r for r in map(json.loads, open(tmp_path / "smoke.jsonl"))
             if r["kind"] == "smoke"}
    assert smoke[("d64_3wg_n128_pdyn_wgb", 64)]["hung"] is True
    assert smoke[("pdyn_fma", 64)]["ok"] is False
    assert smoke[("d64_3wg_n128_pdyn", 64)]["ok"] and smoke[("pdyn_tma_fma", 96)]["ok"]
    recs = [json.loads(ln) for ln in open(tmp_path / "c64.jsonl")]
    timed = {r["impl"] for r in recs if r["kind"] == "time"}
    assert timed == {"default", "d64_3wg_n128_pdyn"}, timed
    pad = [json.loads(ln) for ln in open(tmp_path / "pad.jsonl")]
    pad_checks = [r for r in pad if r["kind"] == "check" and r.get("pad")]
    assert {(r["variant"], r["d"], r["causal"]) for r in pad_checks} == {
        ("default", 32, False), ("default", 32, True), ("d64_3wg_n128_pdyn", 32, True),
        ("default", 96, False), ("default", 96, True), ("pdyn_tma_fma", 96, True)}
    assert all(r["ok"] for r in pad_checks)
    summary = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("SUMMARY=")][-1][8:])
    assert "[smoke] 3/5" in summary and "d64_3wg_n128_pdyn_wgb d=64 causal=1 HUNG" in summary
    assert "[pad] d=96 causal: default 2/2, pdyn_tma_fma 2/2" in summary, summary
    smoke2 = {r["variant"]: r for r in map(json.loads, open(tmp_path / "b" / "smoke.jsonl"))
              if r["kind"] == "smoke"}
    assert smoke2["pdyn_fma"]["hung"] is True
    assert smoke2["d64_3wg_n128_pdyn"]["skipped"] is True and not smoke2["d64_3wg_n128_pdyn"]["ok"]
    assert smoke2["d64_3wg_n128_wgb"]["ok"] is True


_SLOW_START = """
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
import hopper_dev2 as D
D.VERIFIED -= D.VERIFIED_RUN7
D.SMOKE_STALL_S = 5
D.JOBS["c64"] = (60, ["default", "pdyn_fma"], [(64, True, 256)], [])
print("SMOKE=" + D.run_smoke(sys.argv[1], ["c64"], time.time() + 200))
"""


def test_dev2_smoke_watchdog_allows_a_slow_start(tmp_path):
    """A smoke worker that takes longer than SMOKE_STALL_S to write its first record (imports on
    a loaded machine; here asleep 10 s against a 5 s stall limit) is not declared hung: the
    watchdog gives the first record SMOKE_START_S more. Its variant then passes."""
    env = _compile_env()
    env["HOPPER_DEV2_FAKE"] = "slowstart:10"
    res = subprocess.run([sys.executable, "-c", _SLOW_START, str(tmp_path), ROOT], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("SMOKE=")][-1]
    assert line.startswith("SMOKE=1/1 variants passed") and "stopped" not in line, line


def test_padded_head_dims_enabled():
    assert H.PAD_HEAD_DIMS is True  # on since device run 7 verified the padded variants
    assert set(H.SUPPORTED_HEAD_DIMS) == set(range(8, 257, 8))
    assert H.padded_head_dim(8) == 64 and H.padded_head_dim(96) == 128
    assert H.padded_head_dim(136) == 256 and H.padded_head_dim(256) == 256
    assert H.get_config(96) == H.get_config(128)
    assert H.get_config(96, True) == H.get_config(128, True)


def test_variants_table_is_valid():
    for name, (ov, dims) in H.VARIANTS.items():
        for d in dims or H.NATIVE_HEAD_DIMS:
            for causal in (False, True):
                cfg = H.variant_config(name, d, causal)
                assert H.shared_memory_bytes(d, cfg) <= 227 * 1024, name
    assert H.VARIANTS["default"][0] == {} and H.VARIANTS["v3"][0] == {}
    assert H.FwdConfig(128, 128, 2) == H.base_config(128)  # every later field defaults off
    assert H.variant_config("default", 128, True) == H.get_config(128, True)


def test_ablation_variants_are_the_rows_with_one_switch_changed():
    """The ablation on today's hdim 128 rows (session 34): each variant is the row of run 129 with
    only the switch it names changed, and the kernel implements every one of them. (The
    non-causal row has had pingpong since session 37; run 129's is variant no_pp.)"""
    from dataclasses import replace
    nc = H.get_config(128, False)
    assert nc.pingpong and nc.pingpong_mode == 2
    assert H.variant_config("no_pp", 128, False) == replace(nc, pingpong=False, pingpong_mode=0)
    for causal in (False, True):
        row = H.get_config(128, causal) if causal else H.variant_config("no_pp", 128, False)
        assert row.warp_specialize and row.overlap and not row.pingpong
        want = {"ship_no_ov": replace(row, overlap=False),
                "ship_no_ov_pp": replace(row, overlap=False, pingpong=True, pingpong_mode=2,
                                         q_release_early=False),
                "pp2": replace(row, pingpong=True, pingpong_mode=2, q_release_early=False),
                "pp1": replace(row, pingpong=True, pingpong_mode=1, q_release_early=False)}
        for name, cfg in want.items():
            assert H.variant_config(name, 128, causal) == cfg, (name, causal)
            H._check_switch_support(cfg)
        assert not H.variant_config("no_ws", 128, causal).warp_specialize


def test_supports_gives_reasons_off_gpu():
    import torch
    q = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
    reason = H.supports(q, q, q, False)
    assert isinstance(reason, str) and "CUDA" in reason


def test_config_table_covers_native_head_dims():
    for d in H.SUPPORTED_HEAD_DIMS:
        for causal in (False, True):
            cfg = H.get_config(d, causal)
            assert H.shared_memory_bytes(d, cfg) <= 227 * 1024
            assert cfg.block_m % (64 * cfg.num_consumers) == 0 and cfg.block_n in (64, 128, 256)


# The fast launch path (hopper_fwd.FAST_LAUNCH): a launch whose key was seen before goes straight to
# the compiled kernel. Checked with Triton's own binder under the stand-in sm_90a driver: calls
# with equal keys have equal specialisations (so they would compile to the same kernel), and the
# argument list handed to the compiled kernel is Triton's bound argument list, in order.
_FAST_KEY_SCRIPT = r"""
import itertools, os, sys
sys.path[:0] = [os.path.join(sys.argv[1], "scripts"), sys.argv[1]]
import hopper_dev2 as D
D.install_mock_sm90_driver()
import torch
from fusedattn.kernels import hopper_fwd as H

class Capture:  # stands in for the compiled kernel: records what the fast path launches
    def __getitem__(self, grid):
        return lambda *a: seen.update(grid=grid, args=a)

K = H.attn_fwd_kernel
groups, calls, launched = {}, 0, 0
for d, causal in itertools.product((64, 128, 96), (False, True)):
    cfg = H.get_config(d, causal)
    for sq, sk, h, mis in itertools.product((1, 16, 32, 130, 250), (1, 32, 48, 200, 1000),
                                            (1, 2, 3, 16), (False, True)):
        q = torch.empty(1, sq, h, d, dtype=torch.bfloat16)
        k = torch.empty(1, sk, 1, d, dtype=torch.bfloat16)
        out, lse = torch.empty_like(q), torch.empty(1, h, sq)
        if mis:  # outputs at 2- and 4-byte offsets: pointers not 16-byte aligned
            lse = torch.empty(sq * h + 4)[1:1 + sq * h].view(1, h, sq)
            if not cfg.tma_store:
                out = torch.empty(q.numel() + 8, dtype=torch.bfloat16)[1:1 + q.numel()].view(q.shape)
        key, args, kwargs, grid = H.forward(q, k, k, causal, d ** -0.5, _out=out, _lse=lse,
                                            _key_only=True)
        bound, spec, opts = K.device_caches[0][4](*args, **kwargs)
        groups.setdefault(key, set()).add(repr((spec, opts)))
        calls += 1
        if key not in H._FAST:  # the first call of a key: its arguments become the template
            H._remember(key, K, Capture(), args, kwargs)
        seen = {}
        H.forward(q, k, k, causal, d ** -0.5, _out=out, _lse=lse)   # takes the fast path
        assert seen["grid"] == (grid[0], 1, 1)
        for got, want in zip(seen["args"], bound.values(), strict=True):
            if hasattr(want, "block_shape"):   # a descriptor: the record the launcher reads
                assert isinstance(got, H._DescArg) and got.base is want.base
                assert (got.shape, got.strides, got.padding) == (want.shape, want.strides, want.padding)
            else:
                assert got is want or got == want, (got, want)
        launched += 1
# a candidate's runtime arguments through the fast path (q_l2_prefetch's q_ptr)
cfg = H.variant_config("efq", 128, True)
for sq, sk in ((130, 200), (250, 1000), (130, 201)):
    q = torch.empty(1, sq, 2, 128, dtype=torch.bfloat16)
    k = torch.empty(1, sk, 1, 128, dtype=torch.bfloat16)
    out, lse = torch.empty_like(q), torch.empty(1, 2, sq)
    key, args, kwargs, grid = H.forward(q, k, k, True, 0.1, config=cfg, _out=out, _lse=lse,
                                        _key_only=True)
    assert kwargs["q_ptr"] is q
    bound, spec, opts = K.device_caches[0][4](*args, **kwargs)
    groups.setdefault(key, set()).add(repr((spec, opts)))
    calls += 1
    if key not in H._FAST:
        H._remember(key, K, Capture(), args, kwargs)
    seen = {}
    H.forward(q, k, k, True, 0.1, config=cfg, _out=out, _lse=lse)
    for got, want in zip(seen["args"], bound.values(), strict=True):
        if hasattr(want, "block_shape"):
            assert isinstance(got, H._DescArg) and got.base is want.base
        else:
            assert got is want or got == want, (got, want)
    launched += 1
bad = sum(len(v) > 1 for v in groups.values())
print(f"RESULT calls={calls} keys={len(groups)} bad={bad} launched={launched}")
"""


def test_fast_launch_key_matches_triton_specialisation():
    run_fast_launch_key_script(_FAST_KEY_SCRIPT, ROOT)


def test_wgmma_not_serialised(report):
    """ptxas keeps the wgmmas asynchronous (no info C75xx "wgmma.mma_async instructions are
    serialized": found in the FP8 kernel's packed-P rows in session 4), checked here for every
    16-bit configuration; and the SASS agrees: at most one product in three is followed by a
    wait (a serialised kernel waits after nearly every one)."""
    assert report["wgmma_serialized"] == []
    sc = report["sass_counts"]
    assert 3 * sc["GMMA_WAITED"] <= sc["GMMA"], sc


def test_inspect_names_the_other_switches():
    """The resource report's second line names every switch that differs from FwdConfig's
    defaults and that its first line does not show."""
    from dataclasses import asdict
    assert finspect._other_switches(asdict(H.get_config(256, False))) == \
        "softmax_fma, split_loops, o_half"
    nbr = finspect._other_switches(asdict(H.variant_config("nbr", 128, True)))
    assert nbr == ("softmax_fma, scheduler=1, l2_section_mb=16, o_buffer, mask_limit, "
                   "kv_release_nb, q_release_early")
    assert finspect._other_switches(asdict(H.base_config(128))) == ""


@pytest.mark.parametrize("argv, message", [
    (["--head-dim", "64", "--block-m", "7"], "block_m must give each of the 3 consumer"),
    (["--block-m", "96"], "block_m must give each of the 2 consumer"),
    (["--stages", "0"], "num_stages must be an int from 1 to 8, got 0"),
    (["--block-n", "0"], "block_n must be a power of two from 16 to 256"),
    (["--block-n", "176"], "block_n must be a power of two from 16 to 256"),
    (["--consumer-regs", "100"], "consumer_regs must be a multiple of 8 from 24 to 256"),
    (["--pingpong", "--no-pingpong"], "--pingpong and --no-pingpong contradict"),
    (["--variant", "lazy_ns", "--no-overlap"], "lazy_rescale: the warp-specialised rows"),
])
def test_inspect_refuses_bad_tuning_before_compiling(argv, message, capsys, monkeypatch):
    """A tuning value the kernel cannot take is a usage error naming it (exit status 2), found
    before anything compiles; it used to abort inside LLVM or end in a compiler traceback."""
    monkeypatch.setattr(H, "compile_sm90", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(SystemExit) as exc:
        finspect.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_q_release_early(reports):
    """q_release_early (session 13, device run 66): in the hdim 64 causal row each consumer
    warpgroup releases Q (q_empty) right after its last QK^T, inside the key-block loops, so the
    next tile's Q loads under the last warpgroup's last softmax and P V. More mbarrier arrives
    than the row before it (variant no_qrel), the same GEMMs, no spills; the candidate on the
    overlapped loop (hdim 128) likewise; refused where Q is still read after the last QK^T (O
    through Q's buffer), with the Q prefetch and with pingpong."""
    by_case = _by_case(reports)
    row = by_case[(64, True, json.dumps({}))]
    old = by_case[(64, True, json.dumps({"variant": "no_qrel"}))]
    assert row["config"]["q_release_early"] and not old["config"]["q_release_early"]
    assert row["ptx_mbar_arrive"] > old["ptx_mbar_arrive"], (row["ptx_mbar_arrive"],
                                                             old["ptx_mbar_arrive"])
    assert row["sass_counts"]["HGMMA"] == old["sass_counts"]["HGMMA"]
    assert row["spill_stores"] == 0
    for d, c, name in ((64, False, "qrel"), (128, False, "qrel"), (128, True, None)):
        cand = by_case[(d, c, json.dumps({"variant": name} if name else {}))]
        assert cand["config"]["q_release_early"] and cand["spill_stores"] == 0
    assert by_case[(128, False, json.dumps({"variant": "qrel"}))]["ptx_mbar_arrive"] > by_case[
        (128, False, json.dumps({}))]["ptx_mbar_arrive"]
    for d, c in ((128, False), (256, False), (256, True)):
        assert not H.get_config(d, c).q_release_early
    assert H.get_config(128, True).q_release_early      # since session 17 (device run 79)
    for bad in (dict(o_buffer=False), dict(q_prefetch=True, o_buffer=False), dict(pingpong=True),
                dict(kv_reverse=True)):
        with pytest.raises(ValueError, match="q_release_early"):
            H._check_switch_support(H.get_config(128, True, q_release_early=True, **bad))


def test_q_per_warpgroup(reports):
    """q_per_warpgroup (session 13 candidates qw / qw3; qw3 is the hdim 64 non-causal row since
    device run 71): each of the three consumer warpgroups has its own Q box, q_bar and q_empty
    (two more mbarriers of each kind than one Q tile), the producer loads each box when its
    warpgroup released it; the same GEMMs, the same three Q boxes loaded per tile, no spills;
    refused outside the three-consumer dynamic rows with O's own boxes."""
    by_case = _by_case(reports)
    for causal, name, base in ((True, "qw", {}), (True, "qw3", {}), (True, "qw4", {}),
                               (False, "qw", {"variant": "o_buf3"}),
                               (False, None, {"variant": "o_buf3"})):
        qw = by_case[(64, causal, json.dumps({"variant": name} if name else {}))]
        row = by_case[(64, causal, json.dumps(base))]
        assert qw["config"]["q_per_warpgroup"] and qw["config"]["q_release_early"]
        # q_bar and q_empty: three each instead of one; qw3's third K / V stage: four more
        stages = {"qw": 2, "qw4": 4}.get(name, 3) - 2   # K / V stages beyond 2: 4 barriers each
        assert qw["ptx_mbar_init"] == row["ptx_mbar_init"] + 4 + 4 * stages, (
            qw["ptx_mbar_init"], row["ptx_mbar_init"])
        assert qw["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        assert qw["spill_stores"] == 0 and qw["spill_loads"] == 0
    assert [(d, c) for d in (64, 128, 256) for c in (0, 1)
            if H.get_config(d, c).q_per_warpgroup] == [(64, 0)]
    assert H.get_config(64, False) == H.variant_config("qw3", 64, False, skip_empty_wg=True)
    assert H.variant_config("no_qw", 64, False).q_prefetch
    for bad in (dict(q_prefetch=True, o_buffer=False, q_release_early=False),
                dict(o_buffer=False, q_release_early=False),
                dict(scheduler=0, wg_bounds=False, q_release_early=False)):
        with pytest.raises(ValueError, match="q_per_warpgroup"):   # (the row's bottom_tiles
            H._check_switch_support(H.get_config(64, True, q_per_warpgroup=True,  # off: its own
                                                 bottom_tiles=False, **bad))      # refusal)
    with pytest.raises(ValueError, match="q_per_warpgroup"):
        H._check_switch_support(H.get_config(128, True, q_per_warpgroup=True))


def test_cross_tile(reports):
    """cross_tile (session 26 candidate xt, _consumer_xt): the next tile's first QK^T issued
    before this tile's O store and waited after it. The products are the row's plus one more
    copy of block 0's QK^T per consumer warpgroup (the first tile's, before the loop), none of
    them serialised by ptxas (the same GMMAs followed by a wait as the row: an in-flight product
    across a branch merge or the loop's back edge made ptxas serialise all 80), the O store at
    two sites, no spills; refused outside the dynamic two-consumer rows it was built for."""
    by_case = _by_case(reports)
    for causal, row_case in ((True, {}), (False, {"variant": "xt_dyn"})):
        row = by_case[(128, causal, json.dumps(row_case))]
        assert not row["config"]["cross_tile"]
        for name, mode in (("xt", 1), ("xt2", 2)):
            xt = by_case[(128, causal, json.dumps({"variant": name}))]
            assert xt["config"]["cross_tile"] == mode
            assert xt["config"]["scheduler"] == row["config"]["scheduler"] == 1
            assert xt["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"] + 16
            assert xt["sass_counts"]["GMMA_WAITED"] == row["sass_counts"]["GMMA_WAITED"]
            assert xt["sass_counts"]["UTMASTG"] == 2 * row["sass_counts"]["UTMASTG"]
            assert xt["spill_stores"] == 0 and xt["spill_loads"] == 0
            if mode == 1:
                assert xt["shared_bytes"] == row["shared_bytes"]
            else:  # a second Q tile (32 KB), one more q_bar / q_empty and work-item slot, and
                # still room for Triton's 1 KB of partition state under the 227 KB limit
                assert row["shared_bytes"] + 32768 < xt["shared_bytes"] <= 232448 - 1024
    assert not any(H.get_config(d, c).cross_tile for d in (64, 128, 256) for c in (0, 1))
    with pytest.raises(ValueError, match="cross_tile"):
        H._check_switch_support(H.get_config(128, True, cross_tile=3))
    for bad in (dict(scheduler=0), dict(split_loops=True), dict(wg_bounds=True),
                dict(pingpong=True), dict(q_release_early=False), dict(overlap=False)):
        with pytest.raises(ValueError, match="cross_tile"):
            H._check_switch_support(H.get_config(128, True, cross_tile=True, **bad))
    for d in (64, 256):
        with pytest.raises(ValueError, match="cross_tile"):
            H._check_switch_support(H.get_config(d, True, cross_tile=True))


def test_early_fetch(reports):
    """early_fetch (session 27 candidates ef, efa): the same kernel as the causal row but for
    where the producer's atomic sits (one per tile either way), so the same products, barriers
    and TMA counts, no spills, the same shared memory; refused where the producer is not
    _producer_dynamic."""
    by_case = _by_case(reports)
    for d, name in ((64, "ef"), (128, "ef"), (256, "ef"), (64, "efa"), (128, "efa"),
                    (256, "efa")):
        row = by_case[(d, True, json.dumps({}))]
        ef = by_case[(d, True, json.dumps({"variant": name}))]
        assert ef["config"]["early_fetch"] == (1 if name == "ef" else 2)
        assert not row["config"]["early_fetch"]
        assert ef["sass_sha1"] != row["sass_sha1"]
        for k in ("HGMMA", "GMMA_WAITED", "UTMASTG", "USETMAXREG", "BAR"):
            assert ef["sass_counts"].get(k) == row["sass_counts"].get(k), k
        assert ef["shared_bytes"] == row["shared_bytes"]
        assert ef["spill_stores"] == 0 and ef["spill_loads"] == 0
    assert not any(H.get_config(d, c).early_fetch for d in (64, 128, 256) for c in (0, 1))
    for bad in (dict(scheduler=0), dict(q_per_warpgroup=True), dict(q_prefetch=True)):
        with pytest.raises(ValueError, match="early_fetch"):
            H._check_switch_support(H.get_config(64, True, early_fetch=True, **bad))
    with pytest.raises(ValueError, match="early_fetch"):   # the static scheduler's row
        H._check_switch_support(H.get_config(128, False, early_fetch=1))
    for bad in (dict(kv_reverse=True), dict(kv_release_nb=True)):   # not _producer's loop
        with pytest.raises(ValueError, match="early_fetch"):
            H._check_switch_support(H.get_config(128, True, early_fetch=2, **bad))
    with pytest.raises(ValueError, match="early_fetch must be"):
        H._check_switch_support(H.get_config(128, True, early_fetch=3))


def test_diag_half(reports):
    """diag_half (session 27 candidates dh, d64w2cdh): warpgroup 0's diagonal block as 64 keys:
    at hdim 128 its QK^T as eight 64x64x16 products (128 / 16 steps), none in the row; more
    products than the row (the half block's, and the full last P V kept for the tiles where the
    half does not apply); no spills, the row's shared memory; refused outside the rows it was
    built for. The shipped rows do not have it."""
    by_case = _by_case(reports)
    for d, name, row_case in ((128, "dh", {}), (64, "d64w2cdh", {"variant": "d64w2c"})):
        row = by_case[(d, True, json.dumps(row_case))]
        dh = by_case[(d, True, json.dumps({"variant": name}))]
        assert dh["config"]["diag_half"] and not row["config"]["diag_half"]
        if d == 128:   # (at hdim 64 the P V products are 64x64 as well)
            assert dh["sass_hgmma_shapes"].count("64x64") == d // 16
            assert "64x64" not in row["sass_hgmma_shapes"]
        assert dh["sass_counts"]["HGMMA"] > row["sass_counts"]["HGMMA"]
        assert dh["spill_stores"] == 0 and dh["shared_bytes"] == row["shared_bytes"]
    assert not any(H.get_config(d, c).diag_half for d in (64, 128, 256) for c in (0, 1))
    for bad in (dict(pingpong=True), dict(split_loops=True), dict(kv_reverse=True),
                dict(block_n=64), dict(overlap=False)):
        with pytest.raises(ValueError, match="diag_half"):
            H._check_switch_support(H.get_config(128, True, diag_half=True, **bad))
    with pytest.raises(ValueError, match="diag_half"):   # hdim 256's 64-key blocks
        H._check_switch_support(H.get_config(256, True, diag_half=True))


def test_bottom_tiles(reports):
    """bottom_tiles (session 28, variant bt): the causal rows' m-tiles counted from seqlen_q's
    end. Only the tile decode, the row bounds and the O store of rows below 0 change: the same
    products, no spills, the rows' shared memory (within 64 B); refused outside the dynamic
    scheduler's one-Q-buffer producer. In the table: the hdim 64 causal row only."""
    by_case = _by_case(reports)
    for d in (64, 128, 256):
        row = by_case[(d, True, json.dumps({"variant": "no_bt"} if d == 64 else {}))]
        bt = by_case[(d, True, json.dumps({"variant": "bt"}))]
        assert bt["config"]["bottom_tiles"] and not row["config"]["bottom_tiles"]
        assert bt["sass_counts"]["HGMMA"] == row["sass_counts"]["HGMMA"]
        # (+16 B at hdim 128: the pointer store of a warpgroup whose rows start below 0)
        assert bt["spill_stores"] == 0 and bt["shared_bytes"] <= row["shared_bytes"] + 64
        assert bt["sass_sha1"] != row["sass_sha1"]
    # a non-causal launch of the causal row's config: bottom_tiles moves causal tiles only, so
    # none of its code (the stamps' place, the lse mask, the O store below row 0) is there
    sha = _in_subprocess(
        "from fusedattn.kernels import hopper_fwd as H\n"
        "import fusedattn.inspect as fi\n"
        "for bt in (0, 1):\n"
        "    k = H.compile_sm90(64, False, 'bf16', H.get_config(64, True, bottom_tiles=bt,\n"
        "                                                      diag_stamps=True))\n"
        "    print(fi.sass_digest(fi.sass_counts(k.asm['cubin'])['sass']))\n").split()
    assert len(sha) == 2 and sha[0] == sha[1]
    # in the table: the hdim 64 causal row only (runs 115-116)
    assert [(d, c) for d in (64, 128, 256) for c in (0, 1)
            if H.get_config(d, c).bottom_tiles] == [(64, 1)]
    for d, bad in ((64, dict(scheduler=0)), (64, dict(q_prefetch=True)),
                   (64, dict(q_per_warpgroup=True)), (64, dict(early_fetch=2)),
                   (64, dict(persistent=False)), (128, dict(diag_half=True))):
        with pytest.raises(ValueError, match="bottom_tiles"):
            H._check_switch_support(H.get_config(d, True, bottom_tiles=True, **bad))


def test_sass_loops_counts_the_row_per_key_block():
    """scripts/sass_loops.py (session 29: instructions per key block beside FA3's) on the hdim 128
    causal row: one hot loop of one key block per trip (16 wgmma: 8 for QK^T, 8 for P V) with
    two paths, unmasked and masked, each with 64 exponentials plus the two rescale factors; the
    masked path longer by its compares and selects."""
    out = _in_subprocess(None, [os.path.join(ROOT, "scripts", "sass_loops.py"), "ours", "128", "1"])
    paths = {}
    for line in out.splitlines():
        m = re.match(r"ours d128 c loop (\S+) path (\d): (\d+) inst; EX2 (\d+) HGMMA (\d+) "
                     r"FFMA \d+ FMUL \d+ FADD \d+ FMNMX \d+ FSEL (\d+)", line)
        if m:
            paths.setdefault(m.group(1), []).append([int(x) for x in m.groups()[2:]])
    assert paths, out
    for loop in paths.values():
        assert len(loop) == 2, paths
        (n0, ex0, hg0, sel0), (n1, ex1, hg1, sel1) = loop
        assert (hg0, hg1, ex0, ex1) == (16, 16, 66, 66), loop
        assert sel0 == 0 < 64 <= sel1 and n0 < n1, loop


def _in_subprocess(code, argv=None) -> str:
    """stdout of `python -c code` (or of python argv) in _compile_env()."""
    cmd = [sys.executable] + (argv if argv else ["-c", code])
    res = subprocess.run(cmd, cwd=ROOT, env=_compile_env(), capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout
