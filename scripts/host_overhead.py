"""Host cost per call on a tiny problem, where the GPU work is a few microseconds: how long the
Python side of each path takes (the figure that bounds the speed of short sequences).

    python3 scripts/host_overhead.py [OUT.json]

Per path: mean wall time per call over 300 back-to-back calls (one synchronize at the end), after
20 warm-up calls. bf16, batch 1, seqlen 128, 2 heads, head_dim 128, non-causal and causal.
"""
import json
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])
import fusedattn  # noqa: E402
from fusedattn.bench.impls import import_fa3, sdpa_impl  # noqa: E402
from fusedattn.kernels import hopper_fwd, triton_fwd  # noqa: E402


def per_call_us(fn, n=300, warm=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    q, k, v = (torch.randn(1, 128, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    scale = 128 ** -0.5
    cudnn, flash = sdpa_impl("sdpa-cudnn").fn, sdpa_impl("sdpa-flash").fn
    paths = {
        "fusedattn.attention (auto -> hopper)": lambda c: fusedattn.attention(q, k, v, causal=c),
        "fusedattn.attention(backend='triton')": lambda c: fusedattn.attention(q, k, v, causal=c, backend="triton"),
        "hopper_fwd.forward (kernel launcher only)": lambda c: hopper_fwd.forward(q, k, v, c, scale),
        "triton_fwd.forward (kernel launcher only)": lambda c: triton_fwd.forward(q, k, v, c, scale),
        "SDPA cuDNN": lambda c: cudnn(qt, kt, vt, c, scale),
        "SDPA flash": lambda c: flash(qt, kt, vt, c, scale),
    }
    if torch.cuda.get_device_capability() == (9, 0):   # the FP8 paths (session 9)
        from fusedattn.kernels import hopper_fp8_fwd
        qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
        kv = {c: (fusedattn.quantize_fp8(k, role="k", rotate=True,
                                         block_size=hopper_fp8_fwd.preferred_block(128, c)),
                  fusedattn.quantize_fp8(v, role="v",
                                         block_size=hopper_fp8_fwd.preferred_block(128, c)))
              for c in (False, True)}
        paths["fusedattn.attention_fp8 (16-bit in: 3 quantiser launches + kernel)"] = \
            lambda c: fusedattn.attention_fp8(q, k, v, causal=c)
        paths["fusedattn.attention_fp8 (quantised in)"] = \
            lambda c: fusedattn.attention_fp8(qq, *kv[c], causal=c)
        paths["hopper_fp8_fwd.forward (kernel launcher only)"] = \
            lambda c: hopper_fp8_fwd.forward(qq, *kv[c], c, scale)

        def no_fast(c):   # through Triton's binder on every call (before session 20)
            hopper_fp8_fwd.FAST_LAUNCH = False
            try:
                return hopper_fp8_fwd.forward(qq, *kv[c], c, scale)
            finally:
                hopper_fp8_fwd.FAST_LAUNCH = True
        paths["hopper_fp8_fwd.forward, FAST_LAUNCH off"] = no_fast
    try:
        fa3 = import_fa3()
        paths["FA3 flash_attn_func"] = lambda c: fa3.flash_attn_func(q, k, v, causal=c)
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        paths["FA3 flash_attn_func (e4m3)"] = lambda c: fa3.flash_attn_func(q8, k8, v8, causal=c)
    except Exception as e:  # noqa: BLE001
        print(f"FA3 not available: {e!r}"[:200])
    rows = []
    for name, fn in paths.items():
        for c in (False, True):
            try:
                us = per_call_us(lambda: fn(c))
            except Exception as e:  # noqa: BLE001
                us = None
                print(f"{name} causal={c}: {e!r}"[:300])
            rows.append({"path": name, "causal": c, "us_per_call": us})
    print("| path | causal | us per call |\n|---|---|---|")
    for r in rows:
        us = "failed" if r["us_per_call"] is None else f"{r['us_per_call']:.1f}"
        print(f"| {r['path']} | {'yes' if r['causal'] else 'no'} | {us} |")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)



if __name__ == "__main__":
    main()
