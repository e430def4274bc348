"""kNN kernels past 2^31 bytes and 2^31 elements, and the GPU memory a large search holds (GPU tier).

Each search is checked on a few queries against a float64 scan under the tie rule
(equal distances to the lower index). They need ~30 GiB of GPU memory and a few
GiB of host memory; they run with ``-m gpu`` on a GPU machine.
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine._exact_select_kernel import exact_select

pytestmark = pytest.mark.gpu

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _float64_knn(ref: torch.Tensor, queries: torch.Tensor, k: int, rows: int = 1 << 25):
    """Squared float64 distances and indices of the k nearest, lower index first on ties."""
    best_d = best_i = None
    q = queries.double().cuda()
    for r0 in range(0, ref.shape[0], rows):
        chunk = ref[r0 : r0 + rows].cuda().double()
        d2 = ((q[:, None, :] - chunk[None, :, :]) ** 2).sum(-1)
        idx = torch.arange(r0, r0 + chunk.shape[0], device="cuda").expand_as(d2)
        if best_d is not None:
            d2, idx = torch.cat([best_d, d2], 1), torch.cat([best_i, idx], 1)
        # by (distance, index): a stable sort by index first, then by distance
        by_index = torch.argsort(idx, dim=1, stable=True)
        d2, idx = d2.gather(1, by_index), idx.gather(1, by_index)
        order = torch.argsort(d2, dim=1, stable=True)[:, :k]
        best_d, best_i = d2.gather(1, order), idx.gather(1, order)
    return best_d.cpu(), best_i.cpu()


def _check(dist, ind, ref, queries, k):
    ref_d2, ref_i = _float64_knn(ref, queries, k)
    got_i = torch.as_tensor(np.asarray(ind))[: queries.shape[0]]
    got_d = torch.as_tensor(np.asarray(dist))[: queries.shape[0]].double()
    assert torch.equal(got_i, ref_i)
    # the engine's float32 distances round the exact ones (a float32 square root of a rounded square)
    torch.testing.assert_close(got_d, ref_d2.sqrt(), rtol=3e-7, atol=0)


@needs_gpu
@pytest.mark.slow
def test_host_references_past_2_31_bytes_are_exact_within_working_memory():
    n, d, k, budget_mib = 70_000_000, 8, 10, 1024  # 2.24 GB of float32 references
    X = np.random.default_rng(0).random((n, d), dtype=np.float32)
    Q = X[:64] + np.float32(1e-3)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    dist, ind = kneighbors(X, Q, k, device="cuda", working_memory=budget_mib)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    # the budget, plus the references' resident copy and its prepared rows (d + 1 columns)
    # and the curve order's keys: what the config docstring says working_memory leaves out
    allowed = budget_mib * 2**20 + X.nbytes * (1 + (d + 1) / d) + n * 24 + (256 << 20)
    assert extra <= allowed, (extra / 2**30, allowed / 2**30)
    _check(dist, ind, torch.from_numpy(X), torch.from_numpy(Q[:3]), k)


@needs_gpu
@pytest.mark.slow
def test_device_references_past_2_31_elements_are_exact():
    n, d, k = 270_000_000, 8, 5  # 2.16e9 elements, 8.6 GB on the device
    g = torch.Generator(device="cuda").manual_seed(1)
    X = torch.rand((n, d), device="cuda", generator=g)
    Q = X[-16:] + 1e-3  # neighbours at the far end: offsets past 2^31
    dist, ind = kneighbors(X, Q, k, device="cuda")
    _check(dist.cpu(), ind.cpu(), X, Q[:2], k)
    # k past the fused kernel's register budget: the exact tiles' selection
    dist, ind = kneighbors(X, Q[:2], 300, device="cuda")
    _check(dist.cpu(), ind.cpu(), X, Q[:2], 300)


@needs_gpu
@pytest.mark.slow
def test_exact_selection_kernel_past_2_31_elements_on_tie_heavy_data():
    n, d, k = 270_000_000, 8, 7
    g = torch.Generator(device="cuda").manual_seed(2)
    X = torch.randint(0, 4, (n, d), device="cuda", generator=g, dtype=torch.int8).float()  # 65,536 distinct rows
    Q = X[-8:].clone()
    RT = X.T.contiguous()
    del X
    keys, index = exact_select(Q.T.contiguous(), RT, k, "sqeuclidean", exclude_self=False)
    ref_d2, ref_i = _float64_knn(RT.T, Q[:2], k)
    assert torch.equal(index[:2].cpu(), ref_i)
    assert torch.equal(keys[:2].cpu(), ref_d2)


@needs_gpu
@pytest.mark.slow
def test_bitmap_and_counts_past_2_31_words():
    from gpumine.counting._triton import and_count_matrix

    nw = (1 << 30) + 12_345  # two rows of each operand: 2^31 + words, 17 GB each
    A = torch.empty((2, nw), dtype=torch.int64, device="cuda")
    A[0].fill_(-1)  # every bit
    A[1].fill_(0x5555555555555555)  # every other bit
    R = torch.empty_like(A)
    R[0].fill_(0x0F0F0F0F0F0F0F0F)
    R[1].fill_(-1)
    R[1, -1] = 0  # the last word, past 2^31 elements, counts too
    got = and_count_matrix(A, R).cpu()
    expected = torch.tensor([[32 * nw, 64 * nw - 64], [16 * nw, 32 * nw - 32]])
    assert torch.equal(got, expected)


@needs_gpu
@pytest.mark.slow
def test_histogram_counts_past_2_31_codes():
    from gpumine.counting._triton import histogram_contingency

    n, d, levels, classes = 300_000_000, 8, 5, 3  # 2.4e9 codes
    g = torch.Generator(device="cuda").manual_seed(3)
    codes = torch.randint(0, levels, (n, d), device="cuda", generator=g, dtype=torch.int32)
    labels = torch.randint(0, classes, (n,), device="cuda", generator=g)
    got = histogram_contingency(codes, [levels] * d, labels, classes)
    for j in (0, d - 1):
        expected = torch.bincount(codes[:, j].long() * classes + labels, minlength=levels * classes).view(levels, classes)
        assert torch.equal(got[j * levels : (j + 1) * levels], expected)
    assert int(got.sum()) == n * d


def _as_if_too_large(monkeypatch, streamed=True):
    """References over 10 MB as if larger than the GPU (``streamed``), or as if only a third of it."""
    from gpumine.neighbors import _api
    from gpumine.neighbors.engine import _plan, _search

    monkeypatch.setattr(_api, "fits_on_device", lambda nbytes, *a, **k: nbytes < 10**7)
    if streamed:
        for module in (_plan, _search):
            monkeypatch.setattr(module, "_fits_resident", lambda ref, device: ref.device.type != "cpu")


def _counting_summaries(monkeypatch):
    from gpumine.neighbors import _api

    calls = []
    real = _api.summarise_on_device
    monkeypatch.setattr(_api, "summarise_on_device", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@needs_gpu
@pytest.mark.parametrize("streamed", [True, False])
def test_host_references_too_large_to_check_first_are_read_once_and_give_the_resident_results(monkeypatch, streamed):
    from gpumine.neighbors import _api
    from gpumine.neighbors.engine import _search

    X = np.random.default_rng(4).random((2_000_000, 8), dtype=np.float32)  # continuous: the fused kernel's stream
    Q = X[:500] + np.float32(1e-3)
    resident = kneighbors(X, Q, 10, device="cuda", working_memory=256)
    _as_if_too_large(monkeypatch, streamed)

    def host_pass(*args, **kwargs):
        raise AssertionError("a pass over the references besides the search's")

    monkeypatch.setattr(_api, "all_finite", host_pass)
    monkeypatch.setattr(_search, "magnitudes", host_pass)
    monkeypatch.setattr(_api, "summarise_on_device", host_pass)
    launches = []
    real = _search.fused_candidates
    monkeypatch.setattr(_search, "fused_candidates", lambda Q, R, *a, **k: launches.append(R.shape[0]) or real(Q, R, *a, **k))
    found = kneighbors(X, Q, 10, device="cuda", working_memory=256)
    if streamed:
        assert len(launches) > 1 and X.shape[0] <= sum(launches) < 2 * X.shape[0]  # the host rows, once
    np.testing.assert_array_equal(found[1], resident[1])
    np.testing.assert_array_equal(found[0], resident[0])
    X[5, 3] = np.nan
    with pytest.raises(ValueError, match="X_ref"):
        kneighbors(X, Q, 10, device="cuda", working_memory=256)


@needs_gpu
@pytest.mark.parametrize("kind", ["tiny", "huge", "integers", "self"])
def test_streamed_references_whose_facts_break_the_assumptions_are_searched_again(monkeypatch, kind):
    rng = np.random.default_rng(9)
    X = rng.random((600_000, 6), dtype=np.float32)
    if kind == "tiny":
        X *= np.float32(1e-30)  # needs the range scaling the search did not plan
    elif kind == "huge":
        X *= np.float32(1e25)
    elif kind == "integers":
        X = np.floor(X * 8).astype(np.float32)
    # queries of ordinary magnitude: the search is planned from them, so tiny or huge references break its plan
    Q = None if kind == "self" else rng.random((300, 6), dtype=np.float32)
    resident = kneighbors(X, Q, 7, device="cuda", working_memory=256)
    _as_if_too_large(monkeypatch)
    summaries = _counting_summaries(monkeypatch)
    streamed = kneighbors(X, Q, 7, device="cuda", working_memory=256)
    np.testing.assert_array_equal(streamed[1], resident[1])
    np.testing.assert_array_equal(streamed[0], resident[0])
    assert len(summaries) == (1 if kind in ("tiny", "huge") else 0)
