"""The cells ((head_dim, causal, seqlen) tuples) a device script runs: its default, or the
environment variable VAR as "d,causal,seqlen;..." (causal 0 or 1), e.g. "128,0,2048;256,1,8192"."""
import os


def cells(var: str, default: tuple) -> tuple:
    text = os.environ.get(var)
    if not text:
        return tuple(default)
    return tuple((int(d), bool(int(c)), int(s)) for d, c, s in
                 (x.split(",") for x in text.split(";")))
