"""One forward call pattern for Nsight Compute: warm-up calls, then the profiled one.

    ncu --profile-from-start off ... python3 scripts/ncu_target.py IMPL D CAUSAL SEQLEN

IMPL: hopper (the shipped row), hopper:VARIANT (hopper_fwd.VARIANTS), fa3, cudnn, hopper-fp8
(the FP8 kernel on quantize_fp8's tensors, rotated q/k; hopper-fp8:VARIANT a candidate), fa3-fp8 (FA3 on e4m3 casts). The shape is
the bench's: batch 16384 // seqlen, heads 2048 // head_dim, bf16. Two warm-up calls, then the
third between cudaProfilerStart and cudaProfilerStop (so ncu sees only its kernels).
"""
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from fusedattn.bench.impls import import_fa3, sdpa_impl  # noqa: E402
from fusedattn.kernels import hopper_fwd  # noqa: E402


def main():
    impl, d, causal, s = sys.argv[1], int(sys.argv[2]), sys.argv[3] in ("1", "true", "yes"), int(sys.argv[4])
    b, h = max(1, 16384 // s), 2048 // d
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    scale = d ** -0.5
    if impl.startswith("hopper-fp8"):
        import fusedattn
        from fusedattn.kernels import hopper_fp8_fwd
        qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
        from fusedattn.fp8_api import kv_block_for   # k, v as attention_fp8 quantises them
        kvb = kv_block_for(d, causal)
        kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
        vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)
        cfg = None
        if ":" in impl:   # hopper-fp8:VARIANT (hopper_fp8_fwd.VARIANTS, on the 128-key row)
            cfg = hopper_fp8_fwd.variant_config(impl.split(":", 1)[1], d, causal)
            kq, vq = kq.reblocked(cfg.block_n), vq.reblocked(cfg.block_n)
        fn = lambda: hopper_fp8_fwd.forward(qq, kq, vq, causal, scale, config=cfg)  # noqa: E731
    elif impl == "fa3-fp8":
        fa3 = import_fa3()
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        fn = lambda: fa3.flash_attn_func(q8, k8, v8, causal=causal)  # noqa: E731
    elif impl.startswith("hopper"):
        cfg = None
        if ":" in impl:
            cfg = hopper_fwd.variant_config(impl.split(":", 1)[1], d, causal)
        fn = lambda: hopper_fwd.forward(q, k, v, causal, scale, config=cfg)  # noqa: E731
    elif impl == "fa3":
        fa3 = import_fa3()
        fn = lambda: fa3.flash_attn_func(q, k, v, causal=causal)  # noqa: E731
    elif impl == "cudnn":
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        f = sdpa_impl("sdpa-cudnn").fn
        fn = lambda: f(qt, kt, vt, causal, scale)  # noqa: E731
    else:
        raise SystemExit(f"unknown impl {impl!r}")
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"ncu_target: {impl} d={d} causal={causal} s={s} b={b} h={h}: 3 calls")


if __name__ == "__main__":
    main()
