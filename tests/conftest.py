"""Test set-up shared by every test file.

Without a CUDA GPU the Triton kernels run in Triton's interpreter on the CPU: TRITON_INTERPRET must
be set before any kernel module is imported, so it is set here, before the tests import fusedattn's
kernels. GPU tests carry the ``gpu`` marker and skip without CUDA.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
    if HAS_CUDA:
        # give cached blocks back after each test: the device scripts run the GPU grid in 12
        # pytest workers on one GPU, and each worker's cache kept 8-15 GB (device runs 68 and
        # 72 ran one large case out of memory that way; it passes alone)
        torch.cuda.empty_cache()
