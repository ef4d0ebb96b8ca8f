"""fusedattn.attention_fp8 on the CPU: argument checks (before any kernel runs, naming the argument),
the clear refusal of backend="hopper" off sm_90, and the reference backend's results.

The kernel itself runs in tests/test_gpu_fp8.py (marker gpu)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

import fusedattn
import fusedattn.kernels.fp8_quant  # noqa: F401 - built now, under the interpreter conftest set (a
#   later first import inside a test that sets TRITON_INTERPRET=0, as test_bench's do, would not be)
from fusedattn import QuantizedTensor, attention_fp8, quantize_fp8
from fusedattn.fp8_reference import fp8_attention_forward
from fusedattn.reference import attention_oracle

ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _qkv(b=1, sq=40, sk=56, h=4, hk=2, d=64, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g).to(dtype) for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))


def _quantised(q, k, v, rotate=True, seed=0, block=128, kv_block=None, causal=False):
    """q with `block` rows per scale; k and v as attention_fp8 quantises 16-bit inputs
    (fp8_api.kv_block_for: the FP8 kernel's key tile for (head_dim, causal)) unless kv_block."""
    from fusedattn.fp8_api import kv_block_for
    kvb = kv_block or kv_block_for(q.shape[-1], causal)
    return (quantize_fp8(q, role="q", rotate=rotate, seed=seed, block_size=block),
            quantize_fp8(k, role="k", rotate=rotate, seed=seed, block_size=kvb),
            quantize_fp8(v, role="v", block_size=kvb))


def test_exported():
    assert fusedattn.attention_fp8 is attention_fp8 and "attention_fp8" in fusedattn.__all__


# --- the reference backend: what the call computes ------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_reference_equals_the_spec_on_the_same_quantisation(causal):
    q, k, v = _qkv()
    out, lse = attention_fp8(q, k, v, causal=causal, return_lse=True, backend="reference")
    qq, kq, vq = _quantised(q, k, v, causal=causal)      # the defaults: incoherent, seed 0, key tiles
    ref_out, ref_lse = fp8_attention_forward(qq, kq, vq, causal, out_dtype=torch.bfloat16)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and lse.shape == (1, 4, 40)
    # and it is FP8 attention: close to the exact result by the study's margin, not bf16's
    o64, l64 = attention_oracle(q, k, v, causal)
    rel = ((out.double() - o64).norm() / o64.norm()).item()
    assert 1e-3 < rel < 0.08, rel


def test_from_quantised_and_mixed_inputs():
    q, k, v = _qkv(sq=33, sk=130)
    qq, kq, vq = _quantised(q, k, v, seed=7)
    full = attention_fp8(qq, kq, vq, backend="reference")
    assert torch.equal(full, attention_fp8(q, k, v, seed=7, backend="reference"))
    # an FP8 KV cache and a fresh 16-bit q: q follows the cache's rotation and seed
    assert torch.equal(full, attention_fp8(q, kq, vq, backend="reference"))
    assert torch.equal(full, attention_fp8(qq, k, v, backend="reference"))
    # without rotation
    plain = _quantised(q, k, v, rotate=False)
    assert torch.equal(attention_fp8(*plain, backend="reference"),
                       attention_fp8(q, k, v, incoherent=False, backend="reference"))
    assert torch.equal(attention_fp8(q, plain[1], plain[2], backend="reference"),
                       attention_fp8(*plain, backend="reference"))


def test_output_dtype_follows_q_and_nothing_is_modified():
    q, k, v = _qkv(dtype=torch.float16)
    before = [t.clone() for t in (q, k, v)]
    assert attention_fp8(q, k, v, backend="reference").dtype == torch.float16
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), before))
    q32, k32, v32 = (t.float() for t in (q, k, v))
    assert attention_fp8(q32, k32, v32, backend="reference").dtype == torch.bfloat16
    qq, kq, vq = _quantised(q, k, v)
    data = [t.data.clone() for t in (qq, kq, vq)]
    scales = [t.scales.clone() for t in (qq, kq, vq)]
    attention_fp8(qq, kq, vq, causal=True, backend="reference")
    assert all(torch.equal(t.data.view(torch.uint8), d.view(torch.uint8)) for t, d in zip((qq, kq, vq), data))
    assert all(torch.equal(t.scales, s) for t, s in zip((qq, kq, vq), scales))


def test_empty_inputs():
    q, k, v = _qkv(sk=0)
    out, lse = attention_fp8(q, k, v, return_lse=True, backend="reference")
    assert (out == 0).all() and torch.isneginf(lse).all() and out.shape == q.shape
    q, k, v = _qkv(sq=0)
    out, lse = attention_fp8(q, k, v, return_lse=True, backend="reference")
    assert out.shape == (1, 0, 4, 64) and lse.shape == (1, 4, 0)


def test_softmax_scale_and_causal_rows_without_keys():
    q, k, v = _qkv(sq=50, sk=20, h=2, hk=2, d=32)
    out, lse = attention_fp8(q, k, v, causal=True, softmax_scale=0.3, return_lse=True,
                             backend="reference")
    _, ref_lse = attention_oracle(q, k, v, True, 0.3)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    assert (out[:, :30] == 0).all()      # rows 0..29 see no key (bottom-right alignment)


# --- argument checks --------------------------------------------------------------------------------

def _bad_cases():
    q, k, v = _qkv()
    qq, kq, vq = _quantised(q, k, v)
    kq_seed = quantize_fp8(k, role="k", rotate=True, seed=5)
    kq_plain = quantize_fp8(k, role="k")
    return [
        # (args, kwargs, exception, text that must appear)
        ((q.float().numpy(), k, v), {}, TypeError, "q must be a torch.Tensor or a fusedattn.QuantizedTensor"),
        ((q, k.to(torch.float64), v), {}, TypeError, "k has dtype float64"),
        ((q, k, v.to(torch.float8_e4m3fn)), {}, TypeError, "QuantizedTensor from fusedattn.quantize_fp8"),
        ((q[0], k, v), {}, ValueError, "q must have 4 dimensions"),
        ((q, k, v[:, :10]), {}, ValueError, "k and v must have the same shape"),
        ((q, k[:1].expand(2, -1, -1, -1), v[:1].expand(2, -1, -1, -1)), {}, ValueError, "batch"),
        ((q[..., :32], k, v), {}, ValueError, "head_dim"),
        ((q[:, :, :3], k, v), {}, ValueError, "multiple of k and v's kv_heads"),
        ((q, k, v), {"causal": 1}, TypeError, "causal must be a bool"),
        ((q, k, v), {"return_lse": None}, TypeError, "return_lse"),
        ((q, k, v), {"softmax_scale": float("nan")}, ValueError, "softmax_scale must be finite"),
        ((q, k, v), {"softmax_scale": "0.1"}, TypeError, "softmax_scale"),
        ((q, k, v), {"incoherent": "yes"}, TypeError, "incoherent"),
        ((q, k, v), {"seed": 1.0}, TypeError, "seed"),
        ((q, k, v), {"backend": "auto"}, ValueError, "backend must be one of 'hopper', 'reference'"),
        ((qq, kq_seed, vq), {}, ValueError, "different seeds"),
        ((qq, kq_plain, vq), {}, ValueError, "q.rotated=True, k.rotated=False"),
        ((qq, kq, vq), {"incoherent": False}, ValueError, "incoherent=False but q was quantised with rotate=True"),
        ((qq, kq, vq), {"seed": 3}, ValueError, "seed=3 but q was rotated with seed 0"),
        ((kq, kq, vq), {}, ValueError, "q is a QuantizedTensor quantised with role='k'"),
        ((qq, vq, vq), {}, ValueError, "k is a QuantizedTensor quantised with role='v'"),
        ((qq, kq, vq, ), {"backend": "reference", "causal": "no"}, TypeError, "causal"),
        ((q, k.float(), v), {}, TypeError, "must share one dtype, got q bfloat16, k float32, v bfloat16"),
        ((q, k, v), {"seed": 2 ** 64}, ValueError, "seed must be in [0, 2**64)"),
        ((q, k, v), {"softmax_scale": 1e39}, ValueError, "softmax_scale must be finite, at most 2.3e+38"),
        ((qq, dataclasses.replace(kq, block_size=0), vq), {}, ValueError,
         "k.block_size must be a positive int, got 0"),
        ((qq, kq, dataclasses.replace(vq, block_size=128.0)), {}, TypeError,
         "v.block_size must be an int, got float"),
        # a hand-built QuantizedTensor's other fields, named as its fields (they used to fail
        # inside an internal quantize_fp8 call, naming its arguments, or pass unchecked)
        ((qq, dataclasses.replace(kq, scales=kq.scales.half()), vq), {}, TypeError,
         "k.scales must be a float32 tensor, got float16"),
        ((dataclasses.replace(qq, rotated=1), kq, vq), {}, TypeError,
         "q.rotated must be a bool, got int"),
        ((qq, dataclasses.replace(kq, seed=-5), vq), {}, ValueError,
         "k.seed must be an int in [0, 2**64), got -5"),
    ]


N_BAD = 30   # len(_bad_cases()), kept literal so that collecting the tests quantises nothing


@functools.lru_cache(maxsize=1)
def _bad_cases_cached():
    cases = _bad_cases()
    assert len(cases) == N_BAD
    return cases


@pytest.mark.parametrize("i", range(N_BAD))
def test_bad_arguments_name_the_argument(i):
    args, kwargs, exc, needle = _bad_cases_cached()[i]
    for backend in ("reference", "hopper"):
        if "backend" in kwargs:
            call_kwargs = kwargs
        else:
            call_kwargs = dict(kwargs, backend=backend)
        with pytest.raises(exc) as info:
            attention_fp8(*args, **call_kwargs)
        assert needle in str(info.value), str(info.value)


def test_hopper_backend_refuses_the_cpu_and_other_head_dims_clearly():
    q, k, v = _qkv(d=96)
    with pytest.raises(ValueError, match=r"head_dim must be one of \(64, 128, 256\)"):
        attention_fp8(q, k, v)
    attention_fp8(q, k, v, backend="reference")            # head_dim 96 is fine emulated
    q, k, v = _qkv()
    if not ON_SM90:
        with pytest.raises(ValueError) as info:
            attention_fp8(q, k, v)
        msg = str(info.value)
        assert "sm_90" in msg and "backend='reference'" in msg
    kq = quantize_fp8(k, role="k", block_size=64)
    vq = quantize_fp8(v, role="v", block_size=64)
    with pytest.raises(ValueError, match="k was quantised with block_size=64"):
        attention_fp8(q, kq, vq)
    attention_fp8(q, kq, vq, backend="reference")          # the emulation takes any block size
    with pytest.raises(ValueError, match="k and v must share a block_size"):
        attention_fp8(q, kq, quantize_fp8(v, role="v"), backend="reference")


def test_inputs_that_require_grad_are_refused_outside_no_grad():
    q, k, v = _qkv()
    q.requires_grad_(True)
    with pytest.raises(ValueError, match="forward pass only"):
        attention_fp8(q, k, v, backend="reference")
    with torch.no_grad():
        attention_fp8(q, k, v, backend="reference")


def test_scores_that_overflow_give_nan_not_zeros():
    """A softmax_scale the checks accept (at most 2.3e38) can still overflow the scores in
    float32: then NaN (and a logsumexp of +inf), as fusedattn.attention and plain float32
    attention give, never an output of zeros (the emulation measured a +inf row max from 0)."""
    q, k, v = _qkv(sq=64, sk=64, h=2, hk=2, d=64)
    out, lse = attention_fp8(q, k, v, softmax_scale=1e38, return_lse=True, backend="reference")
    ref_out, ref_lse = fusedattn.attention(q, k, v, softmax_scale=1e38, return_lse=True,
                                           backend="reference")
    assert torch.isnan(out).all() and torch.isnan(ref_out).all()
    assert torch.equal(lse, ref_lse) and (lse == float("inf")).all()
    out, lse = attention_fp8(q, k, v, softmax_scale=1e37, return_lse=True, backend="reference")
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


def test_reblocked_checks_its_argument():
    kq = quantize_fp8(torch.randn(1, 300, 2, 64), role="k", block_size=256)
    for bad in (True, 64.0):
        with pytest.raises(TypeError, match="block_size must be an int"):
            kq.reblocked(bad)
    with pytest.raises(ValueError, match="block_size must divide 256, got 96"):
        kq.reblocked(96)
    assert kq.reblocked(128).scales.shape == (1, 2, 3)


def test_hand_built_quantized_tensor_with_wrong_scales_is_refused():
    q, k, v = _qkv()
    qq, kq, vq = _quantised(q, k, v)
    bad = QuantizedTensor(data=kq.data, scales=kq.scales[:, :, :0], block_size=128, rotated=True,
                          seed=0, dtype=torch.bfloat16, role="k")
    with pytest.raises(ValueError, match="k.scales has shape"):
        attention_fp8(qq, bad, vq, backend="reference")


# --- the GPU tests' pass rule (fusedattn/fp8_check.py), exercised on the CPU ------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_pass_rule_accepts_the_spec_and_rejects_broken_kernels(causal):
    from fusedattn.fp8_check import judge_fp8

    q, k, v = _qkv(sq=70, sk=300, h=2, hk=1, d=64, seed=3)
    qq, kq, vq = _quantised(q, k, v, kv_block=128)
    scale = 64 ** -0.5
    out, lse = fp8_attention_forward(qq, kq, vq, causal, scale)
    good = judge_fp8(q, k, v, qq, kq, vq, out, lse, causal, scale)
    assert good["ok"], good["failures"]
    # a kernel that skips the last key block
    kq2 = QuantizedTensor(kq.data[:, :256].contiguous(), kq.scales[..., :2].contiguous(), 128, True, 0,
                          kq.dtype, "k")
    vq2 = QuantizedTensor(vq.data[:, :256].contiguous(), vq.scales[..., :2].contiguous(), 128, False, 0,
                          vq.dtype, "v")
    o2, l2 = fp8_attention_forward(qq, kq2, vq2, causal, scale)
    assert not judge_fp8(q, k, v, qq, kq, vq, o2, l2, causal, scale)["ok"]
    # a wrong scale on one V block
    o3, l3 = fp8_attention_forward(qq, kq, QuantizedTensor(vq.data, vq.scales * torch.tensor([1.0, 1.0, 1.5]),
                                                           128, False, 0, vq.dtype, "v"), causal, scale)
    assert not judge_fp8(q, k, v, qq, kq, vq, o3, l3, causal, scale)["ok"]
    # an unwritten output row
    o4 = out.clone()
    o4[0, 5, 1] = float("nan")
    bad = judge_fp8(q, k, v, qq, kq, vq, o4, lse, causal, scale)
    assert not bad["ok"] and "NaN" in bad["failures"][0]
    # noise of 1/25 of the FP8 error itself (0.2 % of the rms vs ~5 %) is within the rule; noise as large
    # as that error is not
    g = torch.Generator().manual_seed(1)
    rms = out.float().pow(2).mean().sqrt()
    small = out.float() + 0.002 * rms * torch.randn(out.shape, generator=g)
    assert judge_fp8(q, k, v, qq, kq, vq, small.to(out.dtype), lse, causal, scale)["ok"]
    big = out.float() + 0.05 * rms * torch.randn(out.shape, generator=g)
    assert not judge_fp8(q, k, v, qq, kq, vq, big.to(out.dtype), lse, causal, scale)["ok"]


def test_device_script_plumbing_runs_on_the_cpu(tmp_path):
    """scripts/hopper_fp8_dev.py end to end with FP8_DEV_MOCK=1 (the emulation stands in for the
    kernel, small shapes): stages, timeouts, JSON lines and the summary work before the one device
    call that runs it for real."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(FP8_DEV_MOCK="1", PYTHONPATH=root + os.pathsep + env.get("PYTHONPATH", ""))
    out = tmp_path / "fp8"
    proc = subprocess.run([sys.executable, os.path.join(root, "scripts", "hopper_fp8_dev.py"), str(out),
                           "--budget", "170"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"check128": "rc=0"' in proc.stdout and '"bench": "rc=0"' in proc.stdout, proc.stdout[-3000:]
    checks = [json.loads(x) for x in (out / "check.jsonl").read_text().splitlines()]
    assert sum(1 for r in checks if r["kind"] == "check" and r["ok"]) == 11
    assert "FA3's outlier test" in proc.stdout
    bench = [json.loads(x) for x in (out / "bench.jsonl").read_text().splitlines()]
    assert len(bench) == 12 and all("ours_ms" in r and "ours_e2e_ms" in r for r in bench)  # 3 dims x 2 x 2
    assert "| hdim | causal | seqlen | ours |" in (out / "summary.md").read_text()


def test_first_launch_guard_reports_a_hang_without_hanging(monkeypatch):
    """fusedattn.fp8_check.first_launch (used by the GPU tests and the bench before they launch the
    FP8 kernel): a subprocess that hangs after starting head_dim 128 gives a reason per head_dim."""
    from fusedattn import fp8_check

    hang = ("import json, sys, time\n"
            "print(json.dumps({'d': 128, 'started': True}), flush=True)\n"
            "print(json.dumps({'d': 128, 'ok': True}), flush=True)\n"
            "print(json.dumps({'d': 256, 'started': True}), flush=True)\n"
            "time.sleep(60)\n")
    monkeypatch.setattr(fp8_check, "_FIRST_LAUNCH", hang)
    monkeypatch.setattr(fp8_check, "_first_launch_cache", {})
    res = fp8_check.first_launch((128, 256, 64), timeout=5)
    assert res[128] is None
    assert "first launch of head_dim 256" in res[256] and "no result within 5 s" in res[256]
    assert res[64].startswith("not launched")


def test_first_launch_shared_runs_once_per_xdist_run(tmp_path):
    """The GPU tests' first-launch guard: one run per test run, whichever worker comes first;
    the others read its result (and run it themselves if it never comes)."""
    import threading

    from fusedattn.fp8_check import first_launch_shared
    calls = []

    def fake_run(head_dims):
        calls.append(head_dims)
        return {d: (None if d != 64 else "first launch failed: x") for d in head_dims}

    results = [None] * 4

    def worker(i):
        results[i] = first_launch_shared(tmp_path, "uid1", run=fake_run)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(calls) == [(64,), (128,), (256,)]       # one first launch per head_dim
    assert all(r == {128: None, 256: None, 64: "first launch failed: x"} for r in results)
    # no xdist: it just runs; a lock without a result (its owner died): runs after the wait
    assert first_launch_shared(tmp_path, None, run=fake_run)[256] is None
    (tmp_path / "fp8-first-launch-uid2.lock").touch()
    assert first_launch_shared(tmp_path, "uid2", run=fake_run, wait_s=0.3)[64].startswith("first")
