import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "2")
torch.manual_seed(0)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: workflow runs through snakemake (minutes)")
