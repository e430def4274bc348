"""gpumine.datasets (download cache, data folder, shipped sample, loaders, generators) and the gpumine.data alias."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

from gpumine import datasets, io
from gpumine.datasets import _datasets, _paths

# --------------------------------------------------------------------------
# helpers and fixtures
# --------------------------------------------------------------------------


def write(path: Path, text: str, *, compress: bool = False) -> Path:
    payload = text.encode("utf-8")
    path.write_bytes(gzip.compress(payload) if compress else payload)
    return path


@pytest.fixture(scope="module")
def shared_dir() -> Path:
    folder = datasets.find_data_dir()
    if folder is None:
        pytest.skip(
            "shared data not found: no shared/data beside the checkout or above the working "
            "directory, and GPUMINE_DATA_DIR is unset"
        )
    return folder


def shared_file(folder: Path, relative: str) -> Path:
    path = folder / relative
    if not path.is_file():
        pytest.skip(f"shared data not found: {path}")
    return path


# --------------------------------------------------------------------------
# download cache
# --------------------------------------------------------------------------


def test_fetch_file_from_file_url_with_checksum(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"gpumine" * 1000)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    path = datasets.fetch_file(source.as_uri(), sha256=digest, data_home=cache)
    assert path == cache / "source.bin" and path.read_bytes() == source.read_bytes()
    source.unlink()  # the second call is served from the cache
    assert datasets.fetch_file(source.as_uri(), sha256=digest.upper(), data_home=cache) == path
    assert [p.name for p in cache.iterdir()] == ["source.bin"]


def test_fetch_file_checksum_mismatch_deletes_the_download(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"payload")
    actual = hashlib.sha256(b"payload").hexdigest()
    wrong = "0" * 64
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=rf"SHA-256 mismatch: expected {wrong}, got {actual}"):
        datasets.fetch_file(source.as_uri(), sha256=wrong, data_home=cache, filename="f.bin")
    assert not list(cache.iterdir())
    with pytest.raises(ValueError, match=r"size 7 bytes, expected 8"):
        datasets.fetch_file(source.as_uri(), sha256=None, data_home=cache, expected_size=8)
    assert not list(cache.iterdir())


def test_fetch_file_unreachable_says_to_pass_a_local_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMINE_HOME", str(tmp_path / "home"))
    missing = (tmp_path / "nowhere.gz").as_uri()
    with pytest.raises(OSError, match=r"could not download .*pass its local path"):
        datasets.fetch_file(missing, sha256=None)
    assert not list((tmp_path / "home").iterdir())


# --------------------------------------------------------------------------
# locating the shared data folder
# --------------------------------------------------------------------------


def test_find_data_dir_env_var_and_walk_up(tmp_path, monkeypatch):
    target = tmp_path / "root" / "shared" / "data"
    target.mkdir(parents=True)
    monkeypatch.setenv("GPUMINE_DATA_DIR", str(target))
    assert datasets.find_data_dir() == target.resolve()
    monkeypatch.setenv("GPUMINE_DATA_DIR", str(tmp_path / "nope"))
    with pytest.warns(UserWarning, match="is not a folder"):
        assert datasets.find_data_dir() is None
    monkeypatch.delenv("GPUMINE_DATA_DIR")
    checkout = tmp_path / "root" / "main" / "src"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)  # a clone with shared/ beside it
    assert datasets.find_data_dir().resolve() == target.resolve()
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    monkeypatch.chdir(lonely)
    monkeypatch.setattr(_paths, "__file__", str(lonely / "pkg" / "_paths.py"))
    assert datasets.find_data_dir() is None


# --------------------------------------------------------------------------
# shipped sample and loaders on small synthetic files
# --------------------------------------------------------------------------


def test_shipped_covtype_sample():
    X, y = datasets.load_covtype_sample()
    assert X.shape == (6000, 10) and X.dtype == np.float32
    assert y.dtype == np.int64 and set(np.unique(y)) == set(range(1, 8))
    assert np.bincount(y).tolist() == [0, 2188, 2926, 369, 28, 98, 179, 212]
    X54, y54 = datasets.load_covtype_sample(n_features=54)
    assert X54.shape == (6000, 54) and set(np.unique(X54[:, 10:])) <= {0.0, 1.0}
    np.testing.assert_array_equal(X54[:, :10], X)
    with pytest.raises(ValueError, match=r"n_features must be in 1\.\.54"):
        datasets.load_covtype_sample(n_features=55)


def test_shipped_sample_is_small():
    sample = Path(_datasets.__file__).parent / "samples" / "covtype_sample.csv.gz"
    assert sample.stat().st_size < 300_000


def covtype_rows(labels):
    rows = []
    for i, label in enumerate(labels):
        row = [2000 + i, 10, 5] + [0] * 51
        row[10] = 1
        rows.append(",".join(map(str, row + [label])))
    return "\n".join(rows) + "\n"


def test_load_covtype_from_path_and_its_checks(tmp_path, monkeypatch):
    path = write(tmp_path / "covtype.data.gz", covtype_rows([1, 7, 3]), compress=True)
    X, y = datasets.load_covtype(path, n_features=10)
    assert X.shape == (3, 10) and y.tolist() == [1, 7, 3]
    with pytest.raises(ValueError, match=r"labels must be integers 1\.\.7; found \[0, 1\]"):
        datasets.load_covtype(write(tmp_path / "bad.data", covtype_rows([0, 1])))
    with pytest.raises(ValueError, match=r"expected 55 comma-separated columns .* found 3"):
        datasets.load_covtype(write(tmp_path / "narrow.data", "1,2,3\n"))
    # download=True goes through fetch_file, then checks the row count UCI publishes.
    monkeypatch.setattr(_datasets, "fetch_file", lambda url, **kw: path)
    with pytest.raises(ValueError, match=r"has 3 rows, but UCI's covtype\.data has 581012"):
        datasets.load_covtype(download=True)


def test_load_covtype_without_any_data_says_what_to_do(monkeypatch):
    monkeypatch.setattr(_datasets, "find_data_dir", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"covtype.*Pass path=.*fetch_covtype\(\)"):
        datasets.load_covtype()


def test_load_physics_layout(tmp_path):
    rng = np.random.default_rng(0)
    features = np.round(rng.standard_normal((4, 78)), 4)
    lines = [
        f"{100 + i}\t{i % 2}\t" + "\t".join(f"{v:g}" for v in features[i]) for i in range(4)
    ]
    path = write(tmp_path / "phy_train.dat", "\n".join(lines) + "\n")
    X, y, ids = datasets.load_physics(path, return_ids=True)
    assert X.shape == (4, 78) and X.dtype == np.float32
    np.testing.assert_array_equal(X, features.astype(np.float32))
    assert y.tolist() == [0, 1, 0, 1] and ids.tolist() == [100, 101, 102, 103]
    with pytest.raises(ValueError, match=r"expected 80 whitespace-separated columns .* found 79"):
        datasets.load_physics(write(tmp_path / "short.dat", "1 " * 78 + "1\n"))


def test_load_adbench_from_a_folder(tmp_path):
    np.savez(tmp_path / "7_toy.npz", X=np.ones((4, 2), dtype=np.int16), y=np.array([0, 0, 1, 0]))
    X, y = datasets.load_adbench("7_toy", tmp_path)
    assert X.dtype == np.float32 and y.dtype == np.int64 and y.sum() == 1
    X2, _ = datasets.load_adbench("toy", tmp_path / "7_toy.npz")
    np.testing.assert_array_equal(X, X2)
    assert datasets.load_adbench("toy", tmp_path)[0].shape == (4, 2)
    with pytest.raises(ValueError, match=r"no ADBench set named 'cats' .*available: 7_toy"):
        datasets.load_adbench("cats", tmp_path)


def test_loader_subset_errors():
    with pytest.raises(ValueError, match=r"subset must be '10_percent' or 'corrected'"):
        datasets.load_kddcup99(subset="full")
    with pytest.raises(ValueError, match=r"subset must be 'train' or 'test_first99999'"):
        datasets.load_poker_hand(subset="test")


# --------------------------------------------------------------------------
# loaders against the shared real data (skipped when absent)
# --------------------------------------------------------------------------


def test_shared_covtype(shared_dir):
    shared_file(shared_dir, "covertype/covtype.ramp16pct.reconstructed.data.gz")
    X, y = datasets.load_covtype()
    assert X.shape == (92_962, 54) and X.dtype == np.float32
    assert set(np.unique(y)) == set(range(1, 8))
    one_hot = X[:, 10:14].sum(axis=1), X[:, 14:54].sum(axis=1)
    assert (one_hot[0] == 1).all() and (one_hot[1] == 1).all()


def test_shared_kddcup99(shared_dir):
    shared_file(shared_dir, "kddcup99/kddcup.data_10_percent.gz")
    X, y = datasets.load_kddcup99()
    assert X.shape == (494_021, 41) and y.shape == (494_021,)
    assert y[0] == "normal." and len(np.unique(y)) == 23
    assert X[0, 1] == datasets.KDD_PROTOCOL_TYPES.index("tcp")
    assert X[0, 2] == datasets.KDD_SERVICES.index("http")
    assert X[0, 3] == datasets.KDD_FLAGS.index("SF")
    assert len(np.unique(X[:, 2])) == 66 and X[0, 4] == 181
    names = (shared_dir / "kddcup99" / "kddcup.names").read_text().splitlines()[1:]
    assert [line.split(":")[0] for line in names if line.strip()] == list(datasets.KDD_FEATURE_NAMES)


def test_shared_kddcup99_corrected(shared_dir):
    shared_file(shared_dir, "kddcup99/corrected.gz")
    X, y = datasets.load_kddcup99(subset="corrected")
    assert X.shape == (311_029, 41) and len(np.unique(y)) == 38
    assert (X[:, 2] == datasets.KDD_SERVICES.index("icmp")).any()


def test_shared_poker_hand_labels_follow_the_rules(shared_dir):
    shared_file(shared_dir, "poker_hand/poker-hand-training-true.data")
    X, y = datasets.load_poker_hand(dtype=np.int64)
    assert X.shape == (25_010, 10) and np.bincount(y)[9] == 5
    np.testing.assert_array_equal(datasets.poker_hand_labels(X), y)
    shared_file(shared_dir, "poker_hand/poker-hand-testing.first99999.data.gz")
    X, y = datasets.load_poker_hand(subset="test_first99999")
    assert X.shape == (99_999, 10)
    np.testing.assert_array_equal(datasets.poker_hand_labels(X.astype(np.int64)), y)


def test_shared_adbench(shared_dir):
    shared_file(shared_dir, "adbench/10_cover.npz")
    X, y = datasets.load_adbench("10_cover")
    assert X.shape == (286_048, 10) and X.dtype == np.float32
    assert set(np.unique(y)) == {0, 1}
    shared_file(shared_dir, "adbench/16_http.npz")
    X, y = datasets.load_adbench("http")
    assert X.shape == (567_498, 3)


def test_shared_streams_parse_with_headers(shared_dir):
    path = shared_file(shared_dir, "streams/electricity.csv.gz")
    X, y = io.read_csv(path, label_column="class")
    assert X.shape == (45_312, 8) and set(np.unique(y)) == {"UP", "DOWN"}
    path = shared_file(shared_dir, "uscensus1990/USCensus1990.first99rows.data.txt")
    X = io.read_csv(path, dtype=np.int64)
    assert X.shape == (99, 69) and X[0, 0] == 10000


# --------------------------------------------------------------------------
# synthetic generators
# --------------------------------------------------------------------------


def test_make_uniform_is_seeded():
    X = datasets.make_uniform(100, 4, seed=3)
    assert X.shape == (100, 4) and X.dtype == np.float32
    assert ((X >= 0) & (X < 1)).all()
    np.testing.assert_array_equal(X, datasets.make_uniform(100, 4, seed=3))
    assert not np.array_equal(X, datasets.make_uniform(100, 4, seed=4))
    assert datasets.make_uniform(2, 2, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match=r"n must be >= 1"):
        datasets.make_uniform(0, 2)


def test_make_gaussian_blobs():
    X, labels = datasets.make_gaussian_blobs(1001, 3, centers=4, seed=0, return_labels=True)
    assert X.shape == (1001, 3) and X.dtype == np.float32
    assert np.bincount(labels).tolist() == [251, 250, 250, 250]
    np.testing.assert_array_equal(X, datasets.make_gaussian_blobs(1001, 3, centers=4, seed=0))
    centers = np.array([[0.0, 0.0], [100.0, 100.0]])
    X, labels = datasets.make_gaussian_blobs(
        2000, 2, centers, seed=1, cluster_std=0.5, return_labels=True
    )
    for k in range(2):
        np.testing.assert_allclose(X[labels == k].mean(axis=0), centers[k], atol=0.1)
        np.testing.assert_allclose(X[labels == k].std(axis=0), 0.5, atol=0.05)
    with pytest.raises(ValueError, match=r"centers must be an int or an array of shape \(n_"):
        datasets.make_gaussian_blobs(10, 3, centers=np.zeros((2, 2)))


def test_make_poker_hands_deals_valid_hands_with_the_published_odds():
    X, y = datasets.make_poker_hands(200_000, seed=0)
    cards = (X[:, 0::2] - 1) * 13 + (X[:, 1::2] - 1)
    assert (np.sort(cards, axis=1)[:, 1:] != np.sort(cards, axis=1)[:, :-1]).all()
    # Class probabilities from poker-hand.names; 5 standard errors of slack.
    odds = np.array([0.50117739, 0.42256903, 0.04753902, 0.02112845, 0.00392464, 0.0019654,
                     0.00144058, 0.0002401, 0.00001385, 0.00000154])
    observed = np.bincount(y, minlength=10) / len(y)
    assert (np.abs(observed - odds) <= 5 * np.sqrt(odds / len(y)) + 1e-5).all()
    np.testing.assert_array_equal(datasets.make_poker_hands(50, seed=0)[0], X[:50])


# --------------------------------------------------------------------------
# gpumine.data: the compatibility alias of gpumine.io and gpumine.datasets
# --------------------------------------------------------------------------


FORMER_DATA_NAMES = {
    "check_output_path", "read_csv", "read_parquet", "read_npy", "read_npz", "read_table", "write_result",
    "write_array", "atomic_open", "find_data_dir", "get_data_home", "fetch_file", "sha256_of", "load_covtype",
    "fetch_covtype", "load_covtype_sample", "load_kddcup99", "load_poker_hand", "load_adbench", "load_physics",
    "make_uniform", "make_gaussian_blobs", "make_poker_hands", "poker_hand_labels", "COVTYPE_URL", "KDD_PROTOCOL_TYPES",
    "KDD_SERVICES", "KDD_FLAGS", "KDD_FEATURE_NAMES",
}


def test_gpumine_data_exports_the_same_objects_as_io_and_datasets():
    import gpumine.data

    assert set(gpumine.data.__all__) == FORMER_DATA_NAMES
    assert set(io.__all__) | set(datasets.__all__) == FORMER_DATA_NAMES
    assert not set(io.__all__) & set(datasets.__all__)
    for name in FORMER_DATA_NAMES:
        home = io if name in io.__all__ else datasets
        assert getattr(gpumine.data, name) is getattr(home, name), name


def test_importing_gpumine_data_warns_nothing():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-W", "error", "-c", "import gpumine.data"], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr


def test_the_shipped_sample_is_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["gpumine"]
    package = Path(__file__).resolve().parents[2] / "src" / "gpumine"
    shipped = {p for pattern in globs for p in package.glob(pattern)}
    assert Path(_datasets.__file__).parent / "samples" / "covtype_sample.csv.gz" in shipped
