"""Host rows to a GPU through pinned staging buffers filled by host threads (core.tiles)."""

import numpy as np
import pytest
import torch

from gpumine.core import tiles
from gpumine.core.tiles import copy_to_device, iter_row_chunks

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def test_copy_to_device_without_a_gpu_is_to():
    X = torch.arange(12.0).reshape(4, 3)
    assert copy_to_device(X, torch.device("cpu")) is X
    assert torch.equal(copy_to_device(X[:, ::2], "cpu"), X[:, ::2])


@pytest.fixture
def small_pieces(monkeypatch):
    """Staging in small chunks, so small arrays exercise every path."""
    monkeypatch.setattr(tiles, "STAGED_COPY_MIN_BYTES", 1)
    monkeypatch.setattr(tiles, "STAGED_COPY_CHUNK_BYTES", 4096)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("rows, chunk", [(10_007, 1000), (5, 2), (4099, 4098), (3 * 1024, 1024), (7, 1)])
def test_staged_chunks_are_the_rows_while_the_consumer_runs_behind(small_pieces, rows, chunk):
    # the consumer's work on each chunk is queued behind a long sleep on the compute stream: a
    # device buffer refilled before that work ran would show up as wrong rows in `out`
    X = torch.randn(rows, 9)
    out = torch.empty(rows, 9, device="cuda")
    for start, c in iter_row_chunks(X, chunk, torch.device("cuda")):
        torch.cuda._sleep(200_000)
        out[start : start + c.shape[0]] = c * 1
        torch.cuda._sleep(200_000)
        assert torch.equal(c.cpu(), X[start : start + c.shape[0]])  # valid until the next is asked for
    assert torch.equal(out.cpu(), X)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("make", [
    lambda: torch.randn(3001, 18)[:, ::2],  # rows not contiguous
    lambda: torch.randn(3001, 5).to(torch.bfloat16),  # no NumPy dtype: torch copies
    lambda: torch.from_numpy(np.random.default_rng(0).integers(-5, 5, (3001, 4))),
    lambda: torch.randn(3001),  # one dimension
    lambda: torch.randn(3001, 3, 2),
    lambda: torch.randn(3001, 6).pin_memory(),  # transferred from where it is
    lambda: torch.randn(3001, 12).pin_memory()[:, 1::3],
])
def test_staged_copies_of_every_layout_and_dtype_are_exact(small_pieces, make):
    X = make()
    moved = copy_to_device(X, torch.device("cuda"))
    assert moved.device.type == "cuda" and moved.dtype == X.dtype and moved.shape == X.shape
    assert torch.equal(moved.cpu(), X)
    chunks = [(s, c.clone()) for s, c in iter_row_chunks(X, 700, torch.device("cuda"))]
    assert torch.equal(torch.cat([c for _, c in chunks]).cpu(), X)


@pytest.mark.gpu
@needs_gpu
def test_an_abandoned_stream_leaves_no_copy_running(small_pieces):
    X = torch.randn(20_000, 4)
    for _ in range(3):
        stream = iter_row_chunks(X, 1000, torch.device("cuda"))
        start, first = next(stream)
        assert start == 0 and torch.equal(first.cpu(), X[:1000])
        stream.close()  # the generator's finally waits for the staging threads
    assert torch.equal(copy_to_device(X, torch.device("cuda")).cpu(), X)


@pytest.mark.gpu
@needs_gpu
def test_a_large_copy_goes_through_the_staging_unchanged():
    X = torch.randn(tiles.STAGED_COPY_MIN_BYTES // 4 * 3 // 8 + 13, 8)  # a few chunks and a partial one
    assert torch.equal(copy_to_device(X, torch.device("cuda")).cpu(), X)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_a_forked_child_gets_a_staging_pool_of_its_own():
    import os

    parent = tiles._pool()
    assert parent.submit(lambda: 1).result() == 1
    pid = os.fork()
    if pid == 0:  # the child: a pool with no threads would never run this
        try:
            os._exit(0 if tiles._pool() is not parent and tiles._pool().submit(lambda: 7).result(timeout=10) == 7 else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
