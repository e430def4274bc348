"""fetch_covtype downloads UCI Covertype into the cache (scikit-learn's name for a downloader); load_covtype reads
a local file and keeps download=True as an alias of fetch_covtype."""

import gzip

import numpy as np
import pytest

import gpumine.data
from gpumine import datasets
from gpumine.datasets import _datasets


def _covtype_file(path, labels):
    rows = []
    for i, label in enumerate(labels):
        row = [2000 + i, 10, 5] + [0] * 51
        row[10] = 1
        rows.append(",".join(map(str, row + [label])))
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    return path


def test_fetch_covtype_is_exported_beside_load_covtype():
    assert "fetch_covtype" in datasets.__all__ and "fetch_covtype" in gpumine.data.__all__
    assert gpumine.data.fetch_covtype is datasets.fetch_covtype is _datasets.fetch_covtype


def test_fetch_covtype_downloads_through_the_cache_and_checks_the_rows(tmp_path, monkeypatch):
    source = _covtype_file(tmp_path / "covtype.data.gz", [1, 7, 3])
    seen = []
    monkeypatch.setattr(_datasets, "fetch_file", lambda url, **kw: seen.append((url, kw)) or source)
    with pytest.raises(ValueError, match=r"has 3 rows, but UCI's covtype\.data has 581012"):
        datasets.fetch_covtype(data_home=tmp_path / "cache")
    assert seen == [(datasets.COVTYPE_URL, {"sha256": None, "data_home": tmp_path / "cache"})]
    monkeypatch.setattr(_datasets, "_COVTYPE_ROWS", 3)
    X, y = datasets.fetch_covtype(n_features=10, dtype=np.float64)
    assert X.shape == (3, 10) and X.dtype == np.float64 and y.tolist() == [1, 7, 3]


def test_without_download_if_missing_only_the_cache_is_read(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match=r"not in the download cache and download_if_missing=False"):
        datasets.fetch_covtype(data_home=cache, download_if_missing=False)
    assert not list(cache.iterdir())
    # a cached copy is read without the network (fetch_file serves it from the cache)
    _covtype_file(cache / "covtype.data.gz", [2, 2, 5])
    monkeypatch.setattr(_datasets, "_COVTYPE_ROWS", 3)
    X, y = datasets.fetch_covtype(data_home=cache, download_if_missing=False)
    assert X.shape == (3, 54) and y.tolist() == [2, 2, 5]


def test_load_covtype_download_is_fetch_covtype(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(_datasets, "fetch_covtype", lambda **kw: calls.append(kw) or "fetched")
    assert datasets.load_covtype(download=True, data_home=tmp_path, n_features=10) == "fetched"
    assert calls == [{"data_home": tmp_path, "n_features": 10, "dtype": np.float32}]
    # a path wins over download, and is read locally
    X, y = datasets.load_covtype(_covtype_file(tmp_path / "c.data.gz", [4]), download=True)
    assert X.shape == (1, 54) and y.tolist() == [4] and len(calls) == 1
