"""fusedattn's benchmark: ``python -m fusedattn.bench`` (``make bench``).

On a GPU: TFLOP/s of every fusedattn backend beside the anchors (PyTorch SDPA's flash and cuDNN
backends, ``torch.compile(flex_attention)``, FlashAttention-3 when its wheel is installed) on the
FlashAttention-3 paper's grid, forward and backward, each result checked against the float64 oracle;
optionally an accuracy table (``--accuracy``) and a peak-memory table (``--memory``). Without a GPU:
a small problem on the CPU through the public API, checked against the oracle.

Modules: :mod:`.cli` (the command line), :mod:`.speed` (the sweep), :mod:`.impls` (the
implementations; ``FUSEDATTN_FP8_BACKENDS`` is the hook for fp8 columns), :mod:`.accuracy`,
:mod:`.memory`, :mod:`.report` (tables), :mod:`.plot` (PNG figures), :mod:`.compare`, :mod:`.cpu`,
:mod:`.common` (grid, FLOPs, references, pass rule, timers). The method: benchmarks/README.md.
"""


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)


__all__ = ["main"]
