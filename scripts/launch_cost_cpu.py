"""Host time of the hopper launcher's Python side, on a machine without a GPU.

    python3 scripts/launch_cost_cpu.py

Uses hopper_dev2's stand-in sm_90a driver: `hopper_fwd.forward(..., _warmup=True)` runs the whole
launch path (config, TMA descriptors, Triton's argument binding, specialisation and cache lookup)
on CPU tensors and stops before the C launcher (which on a GPU also encodes the TMA descriptors and
issues the launch). The first call per configuration compiles (or reads Triton's cache). Prints the
best of 3 x 2000 calls per configuration and the top of a profile.
"""
import cProfile
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "scripts"), ROOT]
os.environ.pop("TRITON_INTERPRET", None)

import hopper_dev2 as D  # noqa: E402

D.install_mock_sm90_driver()

import torch  # noqa: E402

from fusedattn.kernels import hopper_fwd as H  # noqa: E402


def main(n=2000):
    for d in (64, 128, 256):
        q = torch.empty(1, 128, 2, d, dtype=torch.bfloat16)
        for causal in (False, True):
            H.forward(q, q, q, causal, d ** -0.5, _warmup=True)   # compile / cache
            for _ in range(50):
                H.forward(q, q, q, causal, d ** -0.5, _warmup=True)
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(n):
                    H.forward(q, q, q, causal, d ** -0.5, _warmup=True)
                best = min(best, (time.perf_counter() - t0) / n * 1e6)
            print(f"head_dim {d} causal={causal}: {best:.1f} us per call (Python side of the launch)")
    q = torch.empty(1, 128, 2, 128, dtype=torch.bfloat16)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        H.forward(q, q, q, False, 0.088, _warmup=True)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
