"""The streamed SHA-256 of a GPU tensor (h3gates.nvfp4.compare.sha256 through pinned chunks) is the
digest of its bytes, for sizes around and across the chunk boundary and for non-contiguous views."""

import hashlib

import pytest
import torch

from h3gates.nvfp4 import compare

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("extra", [-1, 0, 1, 12345, compare.STREAM_CHUNK + 7])
def test_streamed_digest_is_the_bytes_digest(extra):
    n = compare.STREAM_CHUNK + extra
    g = torch.Generator().manual_seed(n % 1000)
    host = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
    want = hashlib.sha256(host.numpy().tobytes()).hexdigest()
    assert compare.sha256(host.cuda()) == want == compare.sha256(host)


def test_streamed_digest_of_a_view_and_of_bf16():
    x = torch.randn(20000, 4096, dtype=torch.bfloat16, device="cuda")  # 164 MB
    v = x[:, 100:3300]  # 128 MB, not contiguous: over STREAM_CHUNK, so streamed
    assert v.numel() * v.element_size() > compare.STREAM_CHUNK and not v.is_contiguous()
    assert compare.sha256(v) == compare.sha256(v.cpu()) and compare.sha256(x) == compare.sha256(x.cpu())
