"""PNG plots in the FlashAttention-3 paper's style: one figure per pass, one panel per
(head_dim, causal), grouped bars per implementation over seqlen, the TFLOP/s written on each bar.
A result that failed its check against the oracle is drawn hatched and labelled 'wrong'."""

from __future__ import annotations

from pathlib import Path

from . import common as C
from .impls import impl_order, label_of

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def _mpl():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_speed(entries: list[dict], pass_: str, path: Path, env: dict | None = None) -> Path | None:
    es = [e for e in entries if e.get("pass") == pass_ and "skipped" not in e]
    if not es:
        return None
    plt = _mpl()
    hdims = sorted({int(e["hdim"]) for e in es})
    causals = sorted({bool(e["causal"]) for e in es})
    seqlens = sorted({int(e["seqlen"]) for e in es})
    present = {e["impl"] for e in es}
    impls = [n for n in impl_order() if n in present] + sorted(present - set(impl_order()))
    color = {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(impls)}
    panel_w = max(5.0, 0.13 * len(seqlens) * len(impls) + 1.5)
    fig, axes = plt.subplots(len(causals), len(hdims), figsize=(panel_w * len(hdims), 4.2 * len(causals)),
                             squeeze=False)
    width = 0.85 / max(1, len(impls))
    by = {(int(e["hdim"]), bool(e["causal"]), int(e["seqlen"]), e["impl"]): e for e in es}
    ymax = max([C.num(e.get("tflops")) or 0 for e in es] + [1])
    for r, causal in enumerate(causals):
        for c, d in enumerate(hdims):
            ax = axes[r][c]
            for i, name in enumerate(impls):
                xs, hs, wrong = [], [], []
                for j, s in enumerate(seqlens):
                    e = by.get((d, causal, s, name))
                    t = C.num(e.get("tflops")) if e else None
                    if t is None or "error" in (e or {}):
                        continue
                    xs.append(j + (i - (len(impls) - 1) / 2) * width)
                    hs.append(t)
                    chk = e.get("check")
                    wrong.append(isinstance(chk, dict) and "error" not in chk and not chk.get("passed", True))
                if not xs:
                    continue
                bars = ax.bar(xs, hs, width, color=color[name], label=label_of(name) if (r, c) == (0, 0) else None)
                for bar, w, h in zip(bars, wrong, hs):
                    if w:
                        bar.set_hatch("xx")
                        bar.set_edgecolor("black")
                    ax.text(bar.get_x() + bar.get_width() / 2, h + ymax * 0.01,
                            "wrong" if w else f"{h:.0f}", ha="center", va="bottom", rotation=90, fontsize=6)
            ax.set_xticks(range(len(seqlens)))
            ax.set_xticklabels([C.seqlen_label(s) for s in seqlens])
            ax.set_ylim(0, ymax * 1.18)
            ax.set_xlabel("Sequence length")
            ax.set_ylabel("Speed (TFLOP/s)")
            ax.set_title(f"{'Forward' if pass_ == 'fwd' else 'Backward'}, "
                         f"{'with' if causal else 'without'} causal mask, head dim {d}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
    handles, labels = [], []
    for ax in axes.flat:
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 8), frameon=False,
               bbox_to_anchor=(0.5, 1.0 + 0.02 / len(causals)))
    env = env or {}
    fig.suptitle(f"Attention {'forward' if pass_ == 'fwd' else 'backward'} speed, bf16 "
                 f"({env.get('gpu') or 'GPU'}, {str(env.get('date', ''))[:10]})", y=1.0 + 0.08 / len(causals))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_memory(rows: list[dict], path: Path, env: dict | None = None) -> Path | None:
    ok = [r for r in rows if C.num(r.get("peak_bytes"))]
    if not ok:
        return None
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    present = {r["impl"] for r in ok}
    impls = [n for n in impl_order() if n in present] + sorted(present - set(impl_order()))
    mib = 2 ** 20
    for i, name in enumerate(impls):
        for pass_, style in (("fwd", "-o"), ("bwd", "--s")):
            pts = sorted((r["seqlen"], C.num(r["peak_bytes"]) / mib) for r in ok
                         if r["impl"] == name and r.get("pass") == pass_)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=_COLORS[i % len(_COLORS)],
                        label=f"{label_of(name)} {pass_}", markersize=4)
    io = sorted({(r["seqlen"], C.num(r["io_bytes"]) / mib) for r in ok if r.get("pass") == "fwd"})
    if io:
        ax.plot([p[0] for p in io], [p[1] for p in io], ":", color="black", label="forward inputs+outputs")
    sc = sorted({(r["seqlen"], C.num(r["scores_bytes"]) / mib) for r in ok if r.get("scores_bytes")})
    if sc:
        ax.plot([p[0] for p in sc], [p[1] for p in sc], ":", color="grey", label="one seqlen^2 bf16 score matrix")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("Sequence length")
    ax.set_ylabel("Peak memory of the call (MiB)")
    env = env or {}
    ax.set_title(f"Peak GPU memory, batch 1, 16 heads, head dim 128 ({env.get('gpu') or 'GPU'})", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
