"""What the benchmark runs: fusedattn's backends and the anchors, behind one small interface.

An :class:`Impl` takes (q, k, v, causal, softmax_scale) in its own preferred layout and returns the
output in that layout. fusedattn and FlashAttention-3 take (batch, seqlen, heads, head_dim);
PyTorch's SDPA and FlexAttention take (batch, heads, seqlen, head_dim). Every implementation gets
the same values, copied once per shape into its layout outside the timed region.

Anchors (what a user would pick instead):

* ``sdpa-flash``  ``F.scaled_dot_product_attention`` under ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``
* ``sdpa-cudnn``  the same under ``SDPBackend.CUDNN_ATTENTION``
* ``flex``        ``torch.compile(flex_attention, fullgraph=True, dynamic=False)``, with Dynamo's
                  recompile limits raised so that no shape falls back to the unfused path; a fallback
                  that still happens is detected and reported as an error, never timed
* ``fa3``         FlashAttention-3's forward from the ``fa3-fwd`` wheel (``fa3_fwd_interface``)
* ``fa3-fp8``     the same on float8 e4m3 inputs (no descaling)

FP8 in fusedattn: register the FP8 path in :data:`FUSEDATTN_FP8_BACKENDS` (a name and a factory
returning ``(prepare, run)``); the sweep then adds a forward column ``fusedattn-<name>-fp8``:
``prepare(q, k, v, causal)`` turns the shape's bf16 inputs into what ``run`` takes (a cast, a quantisation
with scales: untimed, as FA3 fp8's cast), ``run(*prepared, causal, softmax_scale)`` is timed and its
output judged against the oracle on the bf16 inputs. :func:`fp8_through_attention` is the factory
for a backend that takes e4m3 tensors through ``fusedattn.attention`` itself.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from .common import FP8

# fusedattn's FP8 forward paths: name -> factory() returning (prepare, run); each gives a column
# fusedattn-<name>-fp8 (registered at the end of this module: "hopper", kernel to kernel, and
# "hopper-e2e", quantisation included in the timed region).
FUSEDATTN_FP8_BACKENDS: dict[str, Callable[[], tuple[Callable, Callable]]] = {}

ANCHOR_NAMES: tuple[str, ...] = ("sdpa-flash", "sdpa-cudnn", "flex", "fa3", "fa3-fp8")
ANCHOR_LABELS = {"sdpa-flash": "SDPA flash", "sdpa-cudnn": "SDPA cuDNN", "flex": "FlexAttention",
                 "fa3": "FA3", "fa3-fp8": "FA3 fp8"}
DEFAULT_FUSEDATTN_BACKENDS: tuple[str, ...] = ("hopper", "triton", "reference")

_ALIASES = {"flash": "sdpa-flash", "cudnn": "sdpa-cudnn", "flexattention": "flex",
            "flex-attention": "flex", "fa3-bf16": "fa3", "fa3fp8": "fa3-fp8"}


def fusedattn_backend_names() -> tuple[str, ...]:
    try:
        import fusedattn
        return tuple(fusedattn.BACKEND_NAMES)
    except Exception as e:  # noqa: BLE001 - the bench still runs the anchors, and says why
        print(f"fusedattn.bench: could not import fusedattn ({type(e).__name__}: {e}); "
              f"assuming backends {', '.join(DEFAULT_FUSEDATTN_BACKENDS)}", file=sys.stderr)
        return DEFAULT_FUSEDATTN_BACKENDS


def impl_order() -> list[str]:
    """Column order: fusedattn backends (fastest first), their fp8 columns, then the anchors."""
    names = [f"fusedattn-{b}" for b in fusedattn_backend_names()]
    names += [f"fusedattn-{b}-fp8" for b in FUSEDATTN_FP8_BACKENDS]
    return names + list(ANCHOR_NAMES)


def label_of(name: str) -> str:
    if name in ANCHOR_LABELS:
        return ANCHOR_LABELS[name]
    return name


def parse_selection(text: str | None) -> list[str]:
    """--backends: comma list of fusedattn backends (``triton`` or ``fusedattn-triton``), anchors
    (``sdpa-flash``, ``sdpa-cudnn``, ``flex``, ``fa3``, ``fa3-fp8``) and groups: ``fusedattn`` (every
    fusedattn backend except ``reference``, and the fp8 columns), ``anchors``, ``all``.
    Default: ``fusedattn,anchors``. Raises ValueError on an unknown name."""
    backends = fusedattn_backend_names()
    fusedattn_all = [f"fusedattn-{b}" for b in backends if b != "reference"]
    fusedattn_all += [f"fusedattn-{b}-fp8" for b in FUSEDATTN_FP8_BACKENDS]
    tokens = [t.strip() for t in (text or "fusedattn,anchors").split(",") if t.strip()]
    out: list[str] = []
    for tok in tokens:
        t = tok.lower().replace("_", "-")
        t = _ALIASES.get(t, t)
        if t == "all":
            names = [f"fusedattn-{b}" for b in backends] + fusedattn_all + list(ANCHOR_NAMES)
        elif t == "fusedattn":
            names = fusedattn_all
        elif t == "anchors":
            names = list(ANCHOR_NAMES)
        elif t in ANCHOR_NAMES:
            names = [t]
        else:
            base = t[len("fusedattn-"):] if t.startswith("fusedattn-") else t
            fp8 = base.endswith("-fp8")
            core = base[: -len("-fp8")] if fp8 else base
            if fp8 and core not in FUSEDATTN_FP8_BACKENDS:
                raise ValueError(f"no fusedattn fp8 path named {core!r} (registered in "
                                 "fusedattn/bench/impls.py FUSEDATTN_FP8_BACKENDS: "
                                 f"{', '.join(FUSEDATTN_FP8_BACKENDS) or 'none yet'})")
            if not fp8 and core not in backends:
                raise ValueError(
                    f"unknown backend {tok!r}: expected fusedattn backends {', '.join(backends)} "
                    f"(optionally with -fp8), anchors {', '.join(ANCHOR_NAMES)}, or fusedattn, anchors, all")
            names = [f"fusedattn-{core}-fp8" if fp8 else f"fusedattn-{core}"]
        for n in names:
            if n not in out:
                out.append(n)
    order = {n: i for i, n in enumerate(impl_order())}
    return sorted(out, key=lambda n: order.get(n, len(order)))


@dataclass
class Impl:
    name: str
    group: str                  # "fusedattn" or "anchor"
    family: str                 # what the speed grid feeds it: "bf16" or "fp8"
    passes: tuple[str, ...]     # ("fwd", "bwd") or ("fwd",)
    layout: str                 # "bshd" or "bhsd"
    fn: Callable                # fn(q, k, v, causal, softmax_scale) -> out, in `layout`
    dtypes: tuple = ()          # input dtypes it takes (accuracy table); fusedattn asks the API
    backend: str | None = None  # the fusedattn backend name
    fwd_with_grad: bool = False  # time the forward through the training graph when bwd is run too
    prepare: Callable | None = None  # prepare(q, k, v, causal) (bf16, bshd) -> fn's inputs; untimed
    note: str = ""
    guard: Callable = field(default=lambda: contextlib.nullcontext([]))

    @property
    def label(self) -> str:
        return label_of(self.name)

    def unavailable(self, q, k, v, causal: bool) -> str | None:
        """None when it can take these inputs, else why not (fusedattn asks available_backends)."""
        if self.prepare is not None:
            return None  # it takes prepared inputs: tried, and any error is reported
        if self.group != "fusedattn":
            if self.dtypes and q.dtype not in self.dtypes:
                return f"{self.label} does not take {str(q.dtype).replace('torch.', '')}"
            return None
        import fusedattn
        try:
            names = fusedattn.available_backends(q, k, v, causal=causal)
        except Exception as e:  # noqa: BLE001 - e.g. a dtype the API does not take
            return f"{type(e).__name__}: {e}"
        if self.backend in names:
            return None
        try:
            reason = fusedattn.explain(q, k, v, causal=causal).reasons.get(self.backend)
        except Exception:  # noqa: BLE001
            reason = None
        return f"backend {self.backend!r} cannot take these inputs" + (f": {reason}" if reason else "")

    def backward_backend(self, q, k, v, causal: bool) -> str | None:
        """For fusedattn: the backend whose kernels compute this backend's gradients."""
        if self.group != "fusedattn":
            return None
        import fusedattn
        try:
            return fusedattn.explain(q, k, v, causal=causal, backend=self.backend).backward
        except Exception:  # noqa: BLE001
            return self.backend


# --- fusedattn --------------------------------------------------------------------------------

def fusedattn_impl(backend: str) -> Impl:
    import fusedattn

    def fn(q, k, v, causal, scale):
        return fusedattn.attention(q, k, v, causal=causal, softmax_scale=scale, backend=backend)

    return Impl(name=f"fusedattn-{backend}", group="fusedattn", family="bf16", passes=("fwd", "bwd"),
                layout="bshd", fn=fn, backend=backend)


def cast_fp8(q, k, v, causal=False):
    """The prepare step of an fp8 column: plain cast to e4m3, no scaling (FA3 fp8's inputs)."""
    from .common import to_fp8
    return tuple(to_fp8(t) for t in (q, k, v))


def fp8_through_attention(backend: str) -> Callable[[], tuple[Callable, Callable]]:
    """A FUSEDATTN_FP8_BACKENDS factory for a backend taking e4m3 tensors in fusedattn.attention."""
    def factory():
        import fusedattn

        def run(q8, k8, v8, causal, scale):
            return fusedattn.attention(q8, k8, v8, causal=causal, softmax_scale=scale, backend=backend)
        return cast_fp8, run
    return factory


def _fp8_kernel_launches(q) -> None:
    """Raise (the bench records it for the cell) when the FP8 kernel failed or hung on its first
    launch at this head_dim, tried once per process in a subprocess with a timeout
    (fusedattn.fp8_check.first_launch), so that a hanging kernel cannot hang the bench."""
    from fusedattn.fp8_api import FP8_HEAD_DIMS
    if q.device.type != "cuda" or q.shape[-1] not in FP8_HEAD_DIMS:
        return  # attention_fp8 raises its own clear error
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        return
    from fusedattn.fp8_check import first_launch
    why = first_launch().get(q.shape[-1])
    if why is not None:
        raise RuntimeError(f"the FP8 kernel is not run in this bench: {why}")


def fp8_hopper_kernel() -> tuple[Callable, Callable]:
    """fusedattn-hopper-fp8, kernel to kernel: prepare = fusedattn.quantize_fp8 of the bf16 inputs
    as attention_fp8 quantises them (q and k rotated with one seed; one scale per 128 rows of q
    and per key tile of k and v, fp8_api.kv_block_for; untimed, as FA3 fp8's cast), run =
    fusedattn.attention_fp8 on the QuantizedTensors (the Gluon FP8 kernel only)."""
    import fusedattn
    from fusedattn.fp8_api import kv_block_for

    def prepare(q, k, v, causal=False):
        _fp8_kernel_launches(q)
        kvb = kv_block_for(q.shape[-1], causal)
        return (fusedattn.quantize_fp8(q, role="q", rotate=True),
                fusedattn.quantize_fp8(k, role="k", rotate=True, block_size=kvb),
                fusedattn.quantize_fp8(v, role="v", block_size=kvb))

    def run(qq, kq, vq, causal, scale):
        return fusedattn.attention_fp8(qq, kq, vq, causal=causal, softmax_scale=scale)
    return prepare, run


def fp8_hopper_end_to_end() -> tuple[Callable, Callable]:
    """fusedattn-hopper-e2e-fp8: the bf16 inputs go in, the timed call quantises them (three
    quantiser launches) and runs the FP8 kernel: what a caller without an FP8 cache pays."""
    import fusedattn

    def prepare(q, k, v, causal=False):
        _fp8_kernel_launches(q)
        return q, k, v

    def run(q, k, v, causal, scale):
        return fusedattn.attention_fp8(q, k, v, causal=causal, softmax_scale=scale)
    return prepare, run


def fusedattn_fp8_impl(name: str) -> Impl:
    prepare, run = FUSEDATTN_FP8_BACKENDS[name]()
    return Impl(name=f"fusedattn-{name}-fp8", group="fusedattn", family="fp8", passes=("fwd",),
                layout="bshd", fn=run, prepare=prepare, backend=name)


FUSEDATTN_FP8_BACKENDS["hopper"] = fp8_hopper_kernel
FUSEDATTN_FP8_BACKENDS["hopper-e2e"] = fp8_hopper_end_to_end


# --- SDPA -------------------------------------------------------------------------------------

def sdpa_impl(name: str) -> Impl:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    attr = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}[name]
    if not hasattr(SDPBackend, attr):
        raise RuntimeError(f"this torch ({torch.__version__}) has no SDPBackend.{attr}")
    backend = getattr(SDPBackend, attr)

    def fn(q, k, v, causal, scale):
        # is_causal is top-left aligned in SDPA; the benchmark only runs seqlen_q == seqlen_k, where
        # it equals fusedattn's bottom-right mask.
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return Impl(name=name, group="anchor", family="bf16", passes=("fwd", "bwd"), layout="bhsd", fn=fn,
                dtypes=(torch.float16, torch.bfloat16))


# --- FlexAttention ------------------------------------------------------------------------------

RECOMPILE_LIMIT = 4096
ACCUMULATED_RECOMPILE_LIMIT = 65536


def raise_dynamo_limits() -> dict:
    """Raise Dynamo's recompile limits (each shape compiles anew under dynamic=False) and make
    hitting one an error instead of a silent fallback to the unfused path. Returns what was set."""
    cfg = torch._dynamo.config
    done = {}
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), RECOMPILE_LIMIT))
            done[name] = getattr(cfg, name)
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), ACCUMULATED_RECOMPILE_LIMIT))
            done[name] = getattr(cfg, name)
    if not getattr(cfg, "suppress_errors", False):
        for name in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
            if hasattr(cfg, name):
                setattr(cfg, name, True)
                done[name] = True
    return done


_FALLBACK_WORDS = ("unfused", "without torch.compile", "recompile_limit", "cache_size_limit",
                   "hit config.")


@contextlib.contextmanager
def fallback_watch():
    """Collect signs that compiled FlexAttention ran its unfused eager path: Dynamo's
    'hit config.recompile_limit' log record and flex_attention's 'unfused implementation' warning.
    Yields a list, filled when the block exits. Other warnings are re-emitted."""
    found: list[str] = []

    class _Handler(logging.Handler):
        def emit(self, record):
            try:
                msg = record.getMessage()
            except Exception:  # noqa: BLE001
                msg = str(record.msg)
            if any(w in msg for w in _FALLBACK_WORDS):
                found.append(msg.strip().splitlines()[0])

    handler = _Handler(level=logging.WARNING)
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        logger.removeHandler(handler)
        for w in caught or ():
            msg = str(w.message)
            if any(word in msg for word in _FALLBACK_WORDS):
                found.append(msg.strip().splitlines()[0])
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


class _Flex:
    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        self.limits = raise_dynamo_limits()
        self.compiled = torch.compile(flex_attention, fullgraph=True, dynamic=False)
        self.create_block_mask = create_block_mask
        self.masks: dict = {}

    def block_mask(self, seqlen_q: int, seqlen_k: int, device):
        key = (seqlen_q, seqlen_k, str(device))
        if key not in self.masks:
            if len(self.masks) >= 8:
                self.masks.clear()
            off = seqlen_k - seqlen_q

            def causal_mask(b, h, q_idx, kv_idx):  # bottom-right aligned, as fusedattn
                return q_idx + off >= kv_idx

            self.masks[key] = self.create_block_mask(causal_mask, None, None, seqlen_q, seqlen_k,
                                                     device=device)
        return self.masks[key]

    def __call__(self, q, k, v, causal, scale):
        mask = self.block_mask(q.shape[2], k.shape[2], q.device) if causal else None
        return self.compiled(q, k, v, block_mask=mask, scale=scale)


def flex_impl() -> Impl:
    flex = _Flex()
    return Impl(name="flex", group="anchor", family="bf16", passes=("fwd", "bwd"), layout="bhsd",
                fn=flex, dtypes=(torch.float16, torch.bfloat16, torch.float32), fwd_with_grad=True,
                guard=fallback_watch,
                note=("torch.compile(flex_attention, fullgraph=True, dynamic=False); Dynamo limits "
                      f"raised ({', '.join(f'{k}={v}' for k, v in flex.limits.items())})"))


# --- FlashAttention-3 ---------------------------------------------------------------------------

def import_fa3():
    """fa3_fwd_interface, after aliasing its config module as the interface expects."""
    sys.modules.setdefault("flash_attn_config", importlib.import_module("fa3_fwd_config"))
    return importlib.import_module("fa3_fwd_interface")


def fa3_impls() -> list[Impl]:
    mod = import_fa3()
    try:
        flags = sys.modules["flash_attn_config"].CONFIG["build_flags"]
    except Exception:  # noqa: BLE001
        flags = {}

    def fn(q, k, v, causal, scale):
        out = mod.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        return out[0] if isinstance(out, (tuple, list)) else out

    half = (torch.bfloat16,) if flags.get("FLASHATTENTION_DISABLE_FP16") else (torch.bfloat16, torch.float16)
    out = [Impl(name="fa3", group="anchor", family="bf16", passes=("fwd",), layout="bshd", fn=fn,
                dtypes=half, note="fa3-fwd wheel: forward only")]
    if FP8 is not None and not flags.get("FLASHATTENTION_DISABLE_FP8"):
        out.append(Impl(name="fa3-fp8", group="anchor", family="fp8", passes=("fwd",), layout="bshd",
                        fn=fn, dtypes=(FP8,), prepare=cast_fp8,
                        note="e4m3 inputs (plain cast, untimed), no descale; bf16 output"))
    return out


# --- discovery ----------------------------------------------------------------------------------

def discover(selection: list[str], device) -> tuple[dict[str, Impl], dict[str, str]]:
    """Build the selected implementations. Returns (impls by name, in column order; {name: why it is
    unavailable}). Nothing raises: an anchor that cannot be set up is reported, not fatal."""
    device = torch.device(device)
    impls: dict[str, Impl] = {}
    missing: dict[str, str] = {}
    fusedattn_error = None
    try:
        import fusedattn  # noqa: F401
    except Exception as e:  # noqa: BLE001
        fusedattn_error = f"fusedattn does not import: {type(e).__name__}: {e}"
    for name in selection:
        try:
            if name.startswith("fusedattn-"):
                if fusedattn_error:
                    raise RuntimeError(fusedattn_error)
                core = name[len("fusedattn-"):]
                if core.endswith("-fp8"):
                    impls[name] = fusedattn_fp8_impl(core[: -len("-fp8")])
                else:
                    impls[name] = fusedattn_impl(core)
            elif name in ("sdpa-flash", "sdpa-cudnn"):
                if device.type != "cuda" and name == "sdpa-cudnn":
                    raise RuntimeError("cuDNN attention runs on CUDA GPUs only")
                impls[name] = sdpa_impl(name)
            elif name == "flex":
                impls[name] = flex_impl()
            elif name in ("fa3", "fa3-fp8"):
                if device.type != "cuda":
                    raise RuntimeError("FlashAttention-3 runs on CUDA GPUs only")
                if "fa3" in impls or "fa3-fp8" in impls:
                    continue
                made = {i.name: i for i in fa3_impls()}
                for n in ("fa3", "fa3-fp8"):
                    if n in selection:
                        if n in made:
                            impls[n] = made[n]
                        else:
                            missing[n] = "this fa3-fwd build has FP8 disabled"
            else:
                missing[name] = "unknown implementation"
        except Exception as e:  # noqa: BLE001
            text = f"{type(e).__name__}: {e}"
            if name in ("fa3", "fa3-fp8"):
                text = ("FlashAttention-3 (the fa3-fwd wheel, module fa3_fwd_interface) is not "
                        f"importable: {text}")
                for n in ("fa3", "fa3-fp8"):
                    if n in selection:
                        missing[n] = text
            else:
                missing[name] = text
    order = {n: i for i, n in enumerate(selection)}
    impls = dict(sorted(impls.items(), key=lambda kv: order.get(kv[0], 99)))
    return impls, missing
