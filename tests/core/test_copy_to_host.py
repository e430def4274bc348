"""copy_to_host: a GPU result into host memory in pinned pieces, dtype converted on the GPU, bit for bit."""

import numpy as np
import pytest
import torch

from gpumine.core import tiles
from gpumine.core.tiles import copy_to_host


def test_host_tensors_take_a_plain_copy():
    src = torch.arange(10, dtype=torch.float64).reshape(5, 2)
    dst = torch.empty((5, 2), dtype=torch.float32)
    assert copy_to_host(dst, src) is dst
    np.testing.assert_array_equal(dst.numpy(), src.numpy().astype(np.float32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 999, 262_144, 1_000_003])
@pytest.mark.parametrize("src_dtype, dst_dtype", [(torch.float64, torch.float32), (torch.int64, torch.int64),
                                                  (torch.float32, torch.float32)])
def test_gpu_result_copied_exactly_in_pieces(monkeypatch, rows, src_dtype, dst_dtype):
    monkeypatch.setattr(tiles, "HOST_COPY_STAGE_BYTES", 1 << 16)  # many pieces, an odd last one
    g = torch.Generator(device="cuda").manual_seed(rows)
    if src_dtype.is_floating_point:
        src = torch.rand((rows, 11), dtype=src_dtype, device="cuda", generator=g) * 1e3
    else:
        src = torch.randint(-(2**40), 2**40, (rows, 11), dtype=src_dtype, device="cuda", generator=g)
    dst = torch.empty((rows, 11), dtype=dst_dtype)
    copy_to_host(dst, src)
    torch.testing.assert_close(dst, src.to(dst_dtype).cpu(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_copy_into_a_strided_destination():
    src = torch.rand((300, 7), device="cuda")
    host = torch.zeros((7, 300))
    copy_to_host(host.t(), src)
    torch.testing.assert_close(host.t(), src.cpu(), rtol=0, atol=0)
