"""Where does one FP8 bench cell's largest error come from? (GPU; seconds.)

    python3 scripts/fp8_outlier.py [HDIM SEQLEN CAUSAL]     # default: 64 512 0, the flagged cell

Rebuilds the bench cell's inputs exactly (same seed formula, shape and generator as
fusedattn.bench.speed.run_cell), quantises them as the bench's fusedattn-hopper-fp8 column does,
and compares, on the bench's check slice (first/last batch entry x first/last head), against the
float64 oracle:
  kernel      the Gluon FP8 kernel (fusedattn.attention_fp8 on the QuantizedTensors)
  emulation   fusedattn.fp8_reference.fp8_attention_forward on the same QuantizedTensors
  plain       bf16 attention on the e4m3-cast inputs (the bench's yardstick; limit 2x + 1e-3)
  fa3         FA3-FP8 on the e4m3 casts, if the fa3-fwd wheel is importable
For the worst element of the kernel it prints its place and the three values, and the largest
kernel-vs-emulation difference anywhere: a kernel fault shows as a large kernel/emulation gap, a
property of the method as the emulation sharing the kernel's error.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fusedattn  # noqa: E402
from fusedattn.bench import common as C  # noqa: E402
from fusedattn.fp8_reference import fp8_attention_forward  # noqa: E402


def main():
    d, s, causal = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1") if len(sys.argv) > 3 \
        else (64, 512, False)
    b, h = C.grid_shape(s, d)
    dev = torch.device("cuda")
    torch.manual_seed(0 * 1_000_003 + d * 7919 + s * 31 + int(causal))   # speed.run_cell, seed 0
    shape = (b, s, h, d)
    q, k, v, _dout = (C.normal_inputs(shape, torch.bfloat16, dev) for _ in range(4))
    scale = d ** -0.5
    qq = fusedattn.quantize_fp8(q, role="q", rotate=True)
    from fusedattn.fp8_api import kv_block_for   # k, v as attention_fp8 quantises them
    kvb = kv_block_for(d, causal)
    kq = fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb)
    vq = fusedattn.quantize_fp8(v, role="v", block_size=kvb)
    bidx, hidx = sorted({0, b - 1}), sorted({0, h - 1})

    def sl(x):
        return x[bidx][:, :, hidx]

    out64, _ = C.oracle_chunked(sl(q), sl(k), sl(v), causal, scale, 1 << 26)
    res = {"kernel": sl(fusedattn.attention_fp8(qq, kq, vq, causal=causal, softmax_scale=scale))}
    res["emulation"] = sl(fp8_attention_forward(qq, kq, vq, causal, scale)[0])
    res["plain"] = C.plain_attention(*C.plain_inputs(sl(q), sl(k), sl(v), "fp8"), causal, scale)
    try:
        from fusedattn.bench.impls import import_fa3
        fa3 = import_fa3()
        q8, k8, v8 = (C.to_fp8(t) for t in (q, k, v))
        res["fa3"] = sl(fa3.flash_attn_func(q8, k8, v8, causal=causal))
    except Exception as e:  # noqa: BLE001
        print(f"FA3-FP8 not run: {e!r}"[:200])
    err = {n: (o.double() - out64).abs() for n, o in res.items()}
    print(f"cell d={d} s={s} causal={causal} (batch {b}, heads {h}); slice b{bidx} h{hidx}")
    for n, e in err.items():
        print(f"  {n:9s} max abs {e.max().item():.4f}  rmse {e.pow(2).mean().sqrt().item():.3e}")
    print(f"  limit (2 x plain + 1e-3) {2 * err['plain'].max().item() + 1e-3:.4f}")
    e = err["kernel"]
    i = torch.unravel_index(torch.argmax(e), e.shape)
    where = tuple(int(x) for x in i)
    print(f"kernel's worst element (slice b, s, h, d) = {where}: oracle {out64[i].item():+.4f}, "
          + ", ".join(f"{n} {res[n][i].float().item():+.4f}" for n in res))
    kd = (res["kernel"].float() - res["emulation"].float()).abs()
    j = torch.unravel_index(torch.argmax(kd), kd.shape)
    print(f"largest kernel - emulation difference {kd.max().item():.4f} at "
          f"{tuple(int(x) for x in j)}; rms {kd.pow(2).mean().sqrt().item():.2e}")
    bo, ho = bidx[where[0]], hidx[where[2]]
    print(f"that row's (batch {bo}, head {ho}): q block scale "
          f"{qq.scales[bo, ho, where[1] // qq.block_size].item():.4g}, k scales "
          f"{[round(x, 4) for x in kq.scales[bo, ho].tolist()]}, v scales "
          f"{[round(x, 4) for x in vq.scales[bo, ho].tolist()]}")


if __name__ == "__main__":
    main()
