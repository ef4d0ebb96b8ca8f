"""The benchmark (python -m fusedattn.bench) on the CPU: the no-GPU path runs and checks against the
oracle, the float64 references it judges with are exact, the sweep machinery records checks,
mismatches and errors, --compare works on two small JSON files, and the CLI parses."""

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fusedattn
from fusedattn.bench import cli
from fusedattn.bench import common as C
from fusedattn.bench import compare, report
from fusedattn.bench.impls import Impl, discover, fallback_watch, parse_selection, raise_dynamo_limits
from fusedattn.bench.speed import SpeedConfig, run_sweep
from fusedattn.reference import attention_oracle

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_interpreter(monkeypatch):
    """backend="auto" on the CPU picks the reference backend, as `make bench` does (conftest turns
    the Triton interpreter on for the kernel tests)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


# --- FLOPs and the grid ---------------------------------------------------------------------------

def test_flops_match_the_anchor_convention():
    # One record of the anchors file: sdpa_flash fwd, hdim 64, seqlen 512, batch 32, heads 32.
    f = C.attention_flops(32, 32, 512, 512, 64, False, "fwd")
    assert f == 4 * 32 * 32 * 512 * 512 * 64
    assert C.tflops(f, 0.2605919986963272) == pytest.approx(263.70524451934574, rel=1e-9)
    assert C.attention_flops(32, 32, 512, 512, 64, True, "fwd") == f / 2
    assert C.attention_flops(32, 32, 512, 512, 64, True, "bwd") == 2.5 * f / 2
    # causal with seqlen_q != seqlen_k counts the visible pairs of the bottom-right mask
    assert C.visible_pairs(2, 5, True) == 4 + 5
    assert C.visible_pairs(5, 2, True) == 0 + 0 + 0 + 1 + 2
    assert C.grid_shape(512, 64) == (32, 32) and C.grid_shape(16384, 256) == (1, 8)


# --- the float64 references -----------------------------------------------------------------------

@pytest.mark.parametrize("sq, sk, h, hk", [(37, 53, 4, 2), (53, 37, 2, 2), (40, 40, 3, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_chunked_oracle_equals_the_oracle(sq, sk, h, hk, causal):
    q = torch.randn(2, sq, h, 16, dtype=torch.float64)
    k = torch.randn(2, sk, hk, 16, dtype=torch.float64)
    v = torch.randn(2, sk, hk, 16, dtype=torch.float64)
    out, lse = attention_oracle(q, k, v, causal=causal)
    # max_elems small enough to force several row blocks
    out_c, lse_c = C.oracle_chunked(q, k, v, causal, 16 ** -0.5, max_elems=2 * h * sk * 7)
    torch.testing.assert_close(out_c, out, rtol=0, atol=1e-12)
    assert torch.equal(torch.isfinite(lse_c), torch.isfinite(lse))
    fin = torch.isfinite(lse)
    torch.testing.assert_close(lse_c[fin], lse[fin], rtol=0, atol=1e-12)


@pytest.mark.parametrize("sq, sk, h, hk", [(29, 45, 4, 2), (45, 29, 2, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_chunked_gradients_equal_autograd(sq, sk, h, hk, causal):
    q = torch.randn(2, sq, h, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, sk, hk, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, sk, hk, 16, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(2, sq, h, 16, dtype=torch.float64)
    out, lse = attention_oracle(q, k, v, causal=causal)
    want = torch.autograd.grad(out, (q, k, v), dout)
    got = C.oracle_grads_chunked(q.detach(), k.detach(), v.detach(), dout, out.detach(), lse.detach(),
                                 causal, 16 ** -0.5, max_elems=2 * h * sk * 5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


def test_error_measures_and_pass_rule():
    ref = torch.randn(100, dtype=torch.float64)
    e = C.err_stats(ref + 1e-3, ref)
    assert e["max_abs"] == pytest.approx(1e-3) and e["rmse"] == pytest.approx(1e-3) and e["finite"]
    bad = ref.clone()
    bad[3] = float("nan")
    assert not C.err_stats(bad, ref)["finite"]
    assert not C.passes_rule(C.err_stats(bad, ref), {"max_abs": 1.0})
    assert C.passes_rule({"max_abs": 2.9e-3, "finite": True}, {"max_abs": 1e-3})
    assert not C.passes_rule({"max_abs": 3.1e-3, "finite": True}, {"max_abs": 1e-3})


def test_outlier_inputs_have_the_stated_distribution():
    torch.manual_seed(0)
    x = C.normal_inputs((1000, 1000), torch.float32, "cpu", outliers=True)
    big = (x.abs() > 6).float().mean().item()      # N(0,1) alone almost never exceeds 6
    assert 2e-4 < big < 2e-3
    assert (x != 0).all()


# --- the no-GPU path ------------------------------------------------------------------------------

def test_cpu_check_matches_the_oracle(no_interpreter):
    from fusedattn.bench.cpu import render_cpu, run_cpu_check

    shape = {"batch": 1, "seqlen": 48, "heads": 4, "kv_heads": 2, "head_dim": 16}
    rows = run_cpu_check(shape=shape, reps=1)
    assert len(rows) == 2 and all(r["passed"] for r in rows), rows
    assert {r["backend_fwd"] for r in rows} == {"reference"}
    text = render_cpu(rows, "test")
    assert "No CUDA GPU found" in text and "matched the float64 oracle" in text


def test_cpu_check_catches_a_wrong_kernel(no_interpreter, monkeypatch):
    from fusedattn.bench.cpu import run_cpu_check

    real = fusedattn.attention

    def wrong(*args, **kwargs):
        res = real(*args, **kwargs)
        return (res[0] * 1.05, res[1]) if isinstance(res, tuple) else res * 1.05

    monkeypatch.setattr(fusedattn, "attention", wrong)
    rows = run_cpu_check(shape={"batch": 1, "seqlen": 32, "heads": 2, "kv_heads": 2, "head_dim": 16}, reps=1)
    assert not any(r["passed"] for r in rows)


def test_cli_without_gpu_runs_and_exits_zero(tmp_path):
    """`python -m fusedattn.bench` as `make bench` runs it on a machine without a GPU (--cpu forces
    that path where a GPU exists)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, "-m", "fusedattn.bench", "--out", str(tmp_path)]
    if torch.cuda.is_available():
        args.append("--cpu")
    res = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No CUDA GPU found" in res.stdout
    assert "every output and gradient matched the float64 oracle" in res.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    assert all(r["passed"] for r in data["cpu_check"])


# --- the CLI parses -------------------------------------------------------------------------------

def test_cli_parses():
    p = cli.build_parser()
    a = p.parse_args(["--passes", "fwd", "--hdims", "64,128", "--seqlens", "512,1024", "--causal", "yes",
                      "--backends", "triton,sdpa-flash", "--out", "x", "--compare", "a.json", "--accuracy",
                      "--memory", "--time-budget", "540"])
    cfg, _ = cli._config(a, p)
    assert cfg.passes == ("fwd",) and cfg.hdims == (64, 128) and cfg.seqlens == (512, 1024)
    assert cfg.causals == (True,) and cfg.time_budget_s == 540 and a.accuracy and a.memory
    q = p.parse_args(["--quick"])
    cfg, _ = cli._config(q, p)
    assert cfg.hdims == C.QUICK_HDIMS and cfg.seqlens == C.QUICK_SEQLENS and len(cfg.cells()) == 12
    full, _ = cli._config(p.parse_args([]), p)
    assert len(full.cells()) == 36 and full.passes == ("fwd", "bwd")
    for bad in (["--passes", "sideways"], ["--hdims", "60"], ["--seqlens", "x"], ["--causal", "maybe"],
                ["--compare", "a", "b", "c"]):
        with pytest.raises(SystemExit):
            cli._config(p.parse_args(bad), p)
    with pytest.raises(SystemExit) as e:
        cli.main(["--backends", "nonsense", "--cpu"])
    assert e.value.code == 2
    # a seed torch.manual_seed cannot take, after the bench's arithmetic on it: a usage error
    # (it was a traceback with exit status 1, which the CPU check uses for a mismatch)
    for bad_seed in ("18446744073709551615", "-1", "2.5"):
        with pytest.raises(SystemExit) as e:
            p.parse_args(["--seed", bad_seed])
        assert e.value.code == 2
    assert p.parse_args(["--seed", str(2 ** 32 - 1)]).seed == 2 ** 32 - 1
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0


def test_backend_selection():
    default = parse_selection(None)
    assert "fusedattn-triton" in default and "fusedattn-reference" not in default
    assert default[-5:] == ["sdpa-flash", "sdpa-cudnn", "flex", "fa3", "fa3-fp8"]
    assert "fusedattn-reference" in parse_selection("all")
    assert parse_selection("sdpa_flash,triton,FA3") == ["fusedattn-triton", "sdpa-flash", "fa3"]
    with pytest.raises(ValueError, match="unknown backend"):
        parse_selection("cutlass")


# --- the sweep machinery, on the CPU --------------------------------------------------------------

def _sdpa_cpu(q, k, v, causal, scale):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _fake_anchor(name, fn):
    return Impl(name=name, group="anchor", family="bf16", passes=("fwd", "bwd"), layout="bhsd", fn=fn)


def test_sweep_checks_flags_wrong_results_and_records_errors(no_interpreter):
    impls, missing = discover(["fusedattn-reference", "sdpa-flash", "fa3"], "cpu")
    assert "fa3" in missing and "fusedattn-reference" in impls

    def wrong(q, k, v, causal, scale):  # a fast wrong kernel: drops the last key
        return _sdpa_cpu(q, k[:, :, :-1], v[:, :, :-1], causal, scale)

    def broken(q, k, v, causal, scale):
        raise RuntimeError("kernel exploded")

    wrong_impl = Impl(name="fusedattn-wrong", group="fusedattn", family="bf16", passes=("fwd", "bwd"),
                      layout="bhsd", fn=wrong, backend="wrong")
    wrong_impl.unavailable = lambda *a: None
    wrong_impl.backward_backend = lambda *a: "wrong"
    impls["fusedattn-wrong"] = wrong_impl
    impls["broken"] = _fake_anchor("broken", broken)
    cfg = SpeedConfig(hdims=(16,), seqlens=(32,), causals=(False, True), tokens=64, hidden=32)
    seen = []
    res = run_sweep(cfg, impls, "cpu", C.cpu_timer(reps=1, warmup=0), on_cell=seen.append,
                    show_progress=False)
    entries = res["entries"]
    assert len(seen) == 2 and res["stopped"] is None
    by = {(e["impl"], e["pass"], e["causal"]): e for e in entries}
    for causal in (False, True):
        for p in ("fwd", "bwd"):
            good = by[("fusedattn-reference", p, causal)]
            assert good["check"]["passed"] and good["tflops"] > 0, good
            assert by[("sdpa-flash", p, causal)]["check"]["passed"]
            bad = by[("fusedattn-wrong", p, causal)]
            assert not bad["check"]["passed"] and bad["tflops"] > 0
            assert "kernel exploded" in by[("broken", p, causal)]["error"]
    lines, ratios = report.speed_table(entries, "fwd")
    table = "\n".join(lines)
    assert "(wrong)" in table and "error" in table
    assert len(ratios["fusedattn-reference"]) == 2 and ratios["fusedattn-wrong"] == []
    text = report.render({"speed": entries, "env": C.environment("cpu")})
    assert "kernel exploded" in text and "WRONG" in text
    assert "SM clock" not in text   # no clock read on the CPU


def test_report_lists_the_sm_clock_per_implementation():
    from fusedattn.bench import report
    entries = [{"impl": "a", "pass": "fwd", "sm_clock_mhz_rounds": [1500, 1700, 1600]},
               {"impl": "a", "pass": "fwd", "sm_clock_mhz_rounds": [1650, None]},
               {"impl": "b", "pass": "fwd", "sm_clock_mhz_rounds": [None, None]}]
    lines = report.clock_lines(entries)
    assert lines == ["- a fwd: median 1650 MHz (range 1500-1700, 4 timings)"]


def test_fp8_hook_adds_a_checked_forward_column(no_interpreter, monkeypatch):
    from fusedattn.bench import impls as I

    def factory():  # an "fp8 kernel": e4m3 inputs, computed by the reference backend in bf16
        def run(q8, k8, v8, causal, scale):
            q, k, v = (t.to(torch.bfloat16) for t in (q8, k8, v8))
            return fusedattn.attention(q, k, v, causal=causal, softmax_scale=scale, backend="reference")
        return I.cast_fp8, run

    monkeypatch.setitem(I.FUSEDATTN_FP8_BACKENDS, "fake", factory)
    sel = parse_selection("fusedattn,sdpa-flash")
    assert "fusedattn-fake-fp8" in sel
    impls, missing = discover(sel, "cpu")
    assert impls["fusedattn-fake-fp8"].family == "fp8" and not missing
    cfg = SpeedConfig(hdims=(16,), seqlens=(32,), causals=(True,), tokens=64, hidden=32)
    entries = run_sweep(cfg, {n: impls[n] for n in ("fusedattn-fake-fp8", "sdpa-flash")}, "cpu",
                        C.cpu_timer(reps=1, warmup=0), show_progress=False)["entries"]
    fp8 = [e for e in entries if e["impl"] == "fusedattn-fake-fp8"]
    assert [e["pass"] for e in fp8] == ["fwd"] and fp8[0]["check"]["passed"] and fp8[0]["tflops"] > 0
    # its yardstick is plain attention on the e4m3-cast inputs: far looser than bf16's
    bf16 = next(e for e in entries if e["impl"] == "sdpa-flash" and e["pass"] == "fwd")
    assert fp8[0]["check"]["plain_max_abs"] > 3 * bf16["check"]["plain_max_abs"]
    assert report.ratio_of(fp8[0], entries) == ("-", None)  # no fp8 anchor in the row
    with pytest.raises(ValueError, match="no fusedattn fp8 path named 'triton'"):
        parse_selection("triton-fp8")


def test_time_budget_stops_before_the_next_shape():
    impls, _ = discover(["sdpa-flash"], "cpu")
    cfg = SpeedConfig(hdims=(16,), seqlens=(32, 64), causals=(False,), tokens=64, hidden=32, time_budget_s=0)
    res = run_sweep(cfg, impls, "cpu", C.cpu_timer(reps=1, warmup=0), show_progress=False)
    assert res["entries"] == [] and len(res["skipped_cells"]) == 2 and "time budget" in res["stopped"]


def test_cli_sweep_path_resume_report_and_compare(tmp_path, no_interpreter):
    """The GPU code path (sweep, JSON, table.md, plots, --resume, --compare, --report), run on the
    CPU with the host clock through the hidden --sweep-device option."""
    pytest.importorskip("matplotlib")
    base = ["--sweep-device", "cpu", "--tokens", "64", "--hidden", "32", "--hdims", "16",
            "--backends", "reference,sdpa-flash,fa3", "--causal", "no"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(base + ["--seqlens", "32", "--out", str(a)]) == 0
    ra = json.loads((a / "results.json").read_text())
    assert ra["status"] == "complete" and "fa3" in ra["unavailable"]
    assert {e["impl"] for e in ra["speed"]} == {"fusedattn-reference", "sdpa-flash"}
    assert (a / "table.md").exists() and (a / "speed-fwd.png").exists() and (a / "speed-bwd.png").exists()
    assert cli.main(base + ["--seqlens", "32,64", "--resume", str(a / "results.json"), "--out", str(b),
                            "--compare", str(a / "results.json"), "--no-plots"]) == 0
    rb = json.loads((b / "results.json").read_text())
    assert sorted({e["seqlen"] for e in rb["speed"]}) == [32, 64]
    assert [e for e in rb["speed"] if e["seqlen"] == 32] == [e for e in ra["speed"]]  # kept, not re-run
    assert "Compare" in (b / "compare.md").read_text()
    before = (b / "results.json").read_bytes()
    assert cli.main(["--report", str(b / "results.json"), "--no-plots"]) == 0
    assert (b / "results.json").read_bytes() == before      # --report re-renders, never rewrites
    # into another folder: table.md beside a copy of the results it shows
    assert cli.main(["--report", str(b / "results.json"), "--out", str(tmp_path / "r"),
                     "--no-plots"]) == 0
    assert (tmp_path / "r" / "results.json").read_bytes() == before
    assert (tmp_path / "r" / "table.md").exists()


def test_cli_checks_its_files_and_numbers_before_any_work(tmp_path, capsys):
    """Every file the call reads (--report / --compare / --resume) and --out are checked first:
    exit 2 with the flag named, nothing written; numeric timing flags must be in range. (Before:
    --report of a foreign JSON overwrote the results.json beside it, and --compare's file was
    read only after the sweep.)"""
    other = tmp_path / "runs" / "other.json"
    other.parent.mkdir()
    other.write_text('{"foo": 1}')
    keep = tmp_path / "runs" / "results.json"
    keep.write_text("KEEP")
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "afile").write_text("")
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"schema": C.SCHEMA, "speed": []}))
    cases = [
        (["--report", str(other)], "--report: " + str(other) + " is not a results.json"),
        (["--report", str(good), "--out", str(other.parent), "--no-plots"],
         "holds another run's results.json"),
        (["--report", str(tmp_path / "missing.json")], "--report: no such file"),
        (["--compare", str(tmp_path / "bad.json"), str(other)], "is not a readable JSON file"),
        (["--sweep-device", "cpu", "--compare", str(tmp_path / "missing.json")], "--compare: no such file"),
        (["--resume", str(tmp_path)], "is a folder"),
        (["--out", str(tmp_path / "afile"), "--list"], "--out: "),
        (["--rounds", "0"], "argument --rounds: must be finite and > 0, got 0"),
        (["--rep", "-100"], "argument --rep: must be finite and > 0"),
        (["--rep", "inf"], "argument --rep: must be finite"),
        (["--warmup", "-5"], "argument --warmup: must be finite and >= 0"),
        (["--time-budget", "0"], "argument --time-budget: must be finite and > 0"),
        (["--backends", ",", "--list"], "--backends: nothing selected"),
    ]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2, argv
        assert needle in capsys.readouterr().err, argv
    assert keep.read_text() == "KEEP" and sorted(p.name for p in other.parent.iterdir()) == \
        ["other.json", "results.json"]


def test_a_bench_bug_in_one_shape_is_recorded_and_the_rest_still_runs(tmp_path, no_interpreter, monkeypatch):
    from fusedattn.bench import speed

    real = speed.run_cell

    def flaky(cell, *args, **kwargs):
        if cell[2] == 64:
            raise KeyError("a bug")
        return real(cell, *args, **kwargs)

    monkeypatch.setattr(speed, "run_cell", flaky)
    rc = cli.main(["--sweep-device", "cpu", "--tokens", "64", "--hidden", "32", "--hdims", "16",
                   "--seqlens", "32,64", "--causal", "no", "--backends", "reference", "--no-plots",
                   "--out", str(tmp_path)])
    assert rc == 1
    res = json.loads((tmp_path / "results.json").read_text())
    assert {e["seqlen"] for e in res["speed"] if "tflops" in e} == {32}
    assert any("KeyError: 'a bug'" in e.get("error", "") for e in res["speed"])


# --- --compare on two small JSON files ------------------------------------------------------------

def _result(tflops_by_impl, passed=True, gpu="NVIDIA H200"):
    speed = []
    for impl, t in tflops_by_impl.items():
        speed.append({"pass": "fwd", "hdim": 128, "causal": False, "seqlen": 4096, "batch": 4, "heads": 16,
                      "impl": impl, "group": "fusedattn" if impl.startswith("fusedattn") else "anchor",
                      "family": "bf16", "tflops": t, "ms": 1.0, "check": {"passed": passed, "max_abs": 1e-3}})
    return {"schema": C.SCHEMA, "env": {"gpu": gpu, "date": "2026-12-02"}, "speed": speed}


def test_compare_two_small_json_files(tmp_path, capsys):
    old = _result({"fusedattn-triton": 400.0, "fusedattn-hopper": 500.0, "sdpa-cudnn": 600.0})
    new = _result({"fusedattn-triton": 480.0, "fusedattn-hopper": 450.0, "sdpa-cudnn": 601.0}, gpu="NVIDIA H100")
    new["speed"][1]["check"]["passed"] = False
    po, pn = tmp_path / "old.json", tmp_path / "new.json"
    po.write_text(json.dumps(old))
    pn.write_text(json.dumps(new))
    cmp = compare.compare(old, new)
    assert [c["impl"] for c in cmp["faster"]] == ["fusedattn-triton"]
    assert [c["impl"] for c in cmp["slower"]] == ["fusedattn-hopper"]
    assert [c["impl"] for c in cmp["same"]] == ["sdpa-cudnn"]
    assert [c["impl"] for c in cmp["newly_wrong"]] == ["fusedattn-hopper"]
    assert cmp["cells"][0]["ratio"] == pytest.approx(450 / 500)
    assert any("gpu differs" in w for w in cmp["warnings"])
    assert cli.main(["--compare", str(po), str(pn), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "1 faster, 1 slower, 1 within 3%" in out and "NOW WRONG" in out and "1.200" in out
    full = (tmp_path / "cmp" / "compare.md").read_text()
    assert "All cells" in full and "| 600 | 601 | 1.002 |" in full


def test_compare_warns_when_the_timing_method_differs():
    from fusedattn.bench import report
    old = _result({"fusedattn-hopper": 500.0})
    new = _result({"fusedattn-hopper": 520.0})
    old["method"] = report.method_record(25, 100, rounds=3, round_warmup_ms=500)
    new["method"] = report.method_record(300, 100, rounds=3, round_warmup_ms=0)
    warnings = compare.compare(old, new)["warnings"]
    assert any("timing method differs (warmup)" in w for w in warnings)
    assert any("timing method differs (order)" in w for w in warnings)
    new["method"] = old["method"]
    assert not any("timing method" in w for w in compare.compare(old, new)["warnings"])


# --- accuracy and FlexAttention's fallback detection ----------------------------------------------

def test_accuracy_table_on_the_cpu(no_interpreter):
    from fusedattn.bench.accuracy import run_accuracy

    impls, _ = discover(["fusedattn-reference", "sdpa-flash"], "cpu")
    rows = run_accuracy(impls, "cpu", causals=(True,), dtypes=("bfloat16", "float32", "fp8"),
                        shape={"batch": 1, "seqlen": 40, "heads": 2, "head_dim": 16}, progress=False)
    ours = [r for r in rows if r["impl"] == "fusedattn-reference"]
    assert {(r["inputs"], r["dtype"]) for r in ours} == {(i, d) for i in ("normal", "outliers")
                                                         for d in ("bfloat16", "float32")}
    assert all(r["passed"] and r["grads_passed"] and "error" not in r for r in ours), ours
    assert all(r["lse_max_abs"] < 1e-4 for r in ours)
    lines = report.accuracy_table(rows)
    assert len(lines) == 2 + len([r for r in rows if r["impl"] != "plain-pytorch"])


def test_flex_fallback_is_detected():
    saved = {k: getattr(torch._dynamo.config, k) for k in ("recompile_limit", "accumulated_recompile_limit",
                                                              "fail_on_recompile_limit_hit")}
    try:
        done = raise_dynamo_limits()
        assert torch._dynamo.config.recompile_limit >= 4096 and done["fail_on_recompile_limit_hit"]
    finally:
        for k, v in saved.items():
            setattr(torch._dynamo.config, k, v)
    with pytest.warns(UserWarning, match="an unrelated warning"):  # passed on, not swallowed
        with fallback_watch() as found:
            logging.getLogger("torch._dynamo.convert_frame").warning(
                "torch._dynamo hit config.%s (%s)\n   function: 'flex_attention'", "recompile_limit", 8)
            warnings.warn("flex_attention called without torch.compile() - this will use an unfused implementation")
            warnings.warn("an unrelated warning")
    assert len(found) == 2 and "recompile_limit" in found[0] and "unfused" in found[1]


def test_git_commit_of_a_checkout_and_of_an_archive_inside_another_checkout(tmp_path):
    """The bench records the project's own commit: from git in a checkout; in a `git archive`
    export sitting inside another checkout (the device runs' snapshots), not the enclosing
    checkout's commit but the one git archive wrote into fusedattn/_revision.txt."""
    def git(*args, cwd):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    outer = tmp_path / "outer"
    (outer / "fusedattn").mkdir(parents=True)
    (outer / "fusedattn" / "_revision.txt").write_text("$Format:%h$\n")
    (outer / ".gitattributes").write_text("fusedattn/_revision.txt export-subst\n")
    git("init", "-q", cwd=outer)
    git("add", "-A", cwd=outer)
    git("commit", "-qm", "x", cwd=outer)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=outer, capture_output=True,
                          text=True).stdout.strip()
    assert C._git_commit(outer) == head
    snap = outer / "snap"   # ignored by nothing, so the outer checkout is dirty now: irrelevant
    snap.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=outer, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(snap)], input=archive, check=True)
    assert C._git_commit(snap) == f"{head} (git archive)"
    (snap / "fusedattn" / "_revision.txt").write_text("$Format:%h$\n")   # a plain copy
    assert C._git_commit(snap) is None


def test_source_digest_names_the_commit_whose_sources_ran(tmp_path):
    """The bench records a digest of fusedattn/'s .py files (fusedattn_source); for two commits
    that differ in one file, the digest of each checked-out tree differs, and
    scripts/source_commit.py maps each digest to its own commit only (a file outside fusedattn/
    and a non-.py file do not count)."""
    import sys
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                              text=True, env=env).stdout.strip()
    (tmp_path / "fusedattn" / "sub").mkdir(parents=True)
    (tmp_path / "fusedattn" / "a.py").write_text("x = 1\n")
    (tmp_path / "fusedattn" / "sub" / "b.py").write_text("y = 2\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    first, d1 = git("rev-parse", "--short", "HEAD"), C.source_digest(tmp_path)
    (tmp_path / "fusedattn" / "notes.txt").write_text("not code\n")
    (tmp_path / "README").write_text("outside\n")
    assert C.source_digest(tmp_path) == d1
    (tmp_path / "fusedattn" / "sub" / "b.py").write_text("y = 3\n")
    git("add", "-A")
    git("commit", "-qm", "two")
    second, d2 = git("rev-parse", "--short", "HEAD"), C.source_digest(tmp_path)
    assert d1 != d2

    def lookup(digest):
        return subprocess.run([sys.executable, str(root / "scripts" / "source_commit.py"), digest],
                              capture_output=True, text=True,
                              env={**env, "SOURCE_COMMIT_ROOT": str(tmp_path)})
    r1, r2, r0 = lookup(d1), lookup(d2), lookup("0" * 12)
    assert r1.returncode == 0 and r1.stdout.split()[0] == first and second not in r1.stdout
    assert r2.returncode == 0 and r2.stdout.split()[0] == second and first not in r2.stdout
    assert r0.returncode == 1 and "no commit" in r0.stdout


def test_time_in_rounds_rotates_the_order_and_takes_medians():
    """The order-fair timing: after a shared warm-up (if any), each round times every implementation once,
    the order rotated by one per round; each figure is the median over its rounds; one that raises
    is recorded as a timing error and left out of later rounds."""
    from fusedattn.bench.speed import time_in_rounds

    calls, timed = [], []
    figures = {"a": [3.0, 1.0, 2.0], "b": [5.0, 7.0, 6.0], "c": [1.0, 1.0]}

    def make(name):
        def fn():
            calls.append(name)
            if name == "c" and len([t for t in timed if t == "c"]) == 2:
                raise RuntimeError("c broke in its third round")
        fn.name = name
        return fn

    def timer(fn):
        fn()
        timed.append(fn.name)
        ms = figures[fn.name][[t for t in timed if t == fn.name].__len__() - 1]
        return {"ms": ms, "ms_p20": ms - 0.5, "ms_p80": ms + 0.5, "reps": 10}

    entries = {n: {"impl": n, "pass": "fwd", "flops": 1e12} for n in "abc"}
    deferred = [(entries[n], make(n), None) for n in "abc"]
    time_in_rounds(deferred, timer, rounds=3, warmup_ms=1.0, device="cpu")
    assert calls[:3] == ["a", "b", "c"]                    # the warm-up ran each in turn
    assert timed == ["a", "b", "c", "b", "c", "a", "a", "b"]   # c raised in round 3
    assert entries["a"]["ms"] == 2.0 and entries["a"]["ms_rounds"] == [3.0, 1.0, 2.0]
    assert entries["a"]["sm_clock_mhz_rounds"] == [None, None, None]   # no CUDA device here
    assert entries["b"]["ms"] == 6.0 and entries["b"]["reps"] == 30
    assert entries["a"]["tflops"] == pytest.approx(1e12 / 2e-3 / 1e12)
    assert "c broke" in entries["c"]["error"] and entries["c"]["error_stage"] == "timing"
    assert "ms" not in entries["c"]


def test_a_broken_context_in_the_rounds_marks_the_shape_fatal(monkeypatch):
    """A CUDA context broken during the rounds: every entry of the rounds without a figure is
    marked fatal (so that --resume runs the shape again), the error propagates as
    FatalCudaError with the shape's entries, and a failed implementation's tensors are dropped."""
    from fusedattn.bench import speed

    broken = {"now": False}
    monkeypatch.setattr(C, "cuda_broken", lambda device: "illegal address" if broken["now"] else None)

    def timer(fn):
        fn()
        return {"ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0, "reps": 1}

    def boom():
        broken["now"] = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    entries = [{"impl": n, "pass": "fwd", "flops": 1e9} for n in "abc"]
    deferred = [(entries[0], lambda: None, None), (entries[1], boom, None), (entries[2], lambda: None, None)]
    with pytest.raises(speed.FatalCudaError):
        speed.time_in_rounds(deferred, timer, rounds=3, warmup_ms=0.0, device="cpu")
    assert len(deferred) == 2 and all(d[0]["impl"] != "b" for d in deferred)
    assert entries[1]["error_stage"] == "timing" and "illegal memory" in entries[1]["error"]

    # through run_cell: the shape's entries come back on the exception, the untimed ones fatal
    broken["now"] = False
    impls, _ = discover(["sdpa-flash"], "cpu")
    real = speed.time_in_rounds

    def breaking(deferred, *a, **k):
        broken["now"] = True
        deferred[0][0]["error"], deferred[0][0]["error_stage"] = "boom", "timing"
        speed._after_error("cpu")

    monkeypatch.setattr(speed, "time_in_rounds", breaking)
    cfg = SpeedConfig(hdims=(16,), seqlens=(32,), causals=(False,), tokens=64, hidden=32)
    with pytest.raises(speed.FatalCudaError) as info:
        speed.run_cell((16, False, 32), cfg, impls, "cpu", C.cpu_timer(reps=1, warmup=0))
    got = info.value.entries
    assert got and all(e["error_stage"] == "fatal" for e in got if "ms" not in e)
    assert any(e["error_stage"] == "fatal" for e in got)
    monkeypatch.setattr(speed, "time_in_rounds", real)
