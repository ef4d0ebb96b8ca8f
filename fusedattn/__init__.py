"""fusedattn: fused attention for PyTorch, written in Python with Triton and Gluon.

    out = fusedattn.attention(q, k, v, causal=True)      # q (batch, seqlen, heads, head_dim)
    out = fusedattn.sdpa(query, key, value)              # torch SDPA's layout and conventions
    print(fusedattn.explain(q, k, v))                     # which backend runs, and why
    out = fusedattn.attention_fp8(q, k, v)               # FP8 forward (Hopper; approximate)

See README.md for the backends, the causal-mask convention and the measured speed.
"""

from .api import Explanation, attention, available_backends, explain, sdpa
from .backends import PREFERENCE as BACKEND_NAMES
from .fp8 import QuantizedTensor, quantize_fp8
from .fp8_api import attention_fp8

__version__ = "0.1.0"

__all__ = ["attention", "sdpa", "explain", "available_backends", "Explanation", "BACKEND_NAMES",
           "quantize_fp8", "QuantizedTensor", "attention_fp8",
           "__version__"]
