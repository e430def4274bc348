"""Tests for gpumine.io (readers, writers) and gpumine.datasets (download cache, loaders, generators)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpumine import datasets, io
from gpumine.datasets import _datasets, _paths
from gpumine.io import _delimited, _writers
from gpumine.utils import _atomic

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
# read_csv: shapes, headers, labels
# --------------------------------------------------------------------------


def test_read_csv_with_header_and_label_by_name(tmp_path):
    path = write(tmp_path / "t.csv", "x,y,kind\n1,2.5,a\n3,4,b\n")
    X, y = io.read_csv(path, label_column="kind")
    np.testing.assert_array_equal(X, np.array([[1, 2.5], [3, 4]], dtype=np.float32))
    assert X.dtype == np.float32 and X.flags.c_contiguous
    assert y.dtype.kind == "U" and y.tolist() == ["a", "b"]


def test_read_csv_without_header_and_label_by_index(tmp_path):
    path = write(tmp_path / "t.csv", "1,2,3\n4,5,6\n")
    assert io.read_csv(path).shape == (2, 3)
    X, y = io.read_csv(path, label_column=-1)
    np.testing.assert_array_equal(X, [[1, 2], [4, 5]])
    assert y.dtype == np.int64 and y.tolist() == [3, 6]
    X0, y0 = io.read_csv(path, label_column=0)
    np.testing.assert_array_equal(X0, [[2, 3], [5, 6]])
    assert y0.tolist() == [1, 4]


def test_header_inference_keeps_data_rows_that_hold_text(tmp_path):
    # KDD Cup 99 style: text in every row of a column is data, not a header.
    path = write(tmp_path / "k.data", "0,tcp,1,normal.\n2,udp,3,smurf.\n")
    X, y = io.read_csv(path, label_column=3, categorical_columns={1: ["tcp", "udp"]})
    np.testing.assert_array_equal(X, [[0, 0, 1], [2, 1, 3]])
    assert y.tolist() == ["normal.", "smurf."]


def test_header_can_be_forced(tmp_path):
    path = write(tmp_path / "t.csv", "10,20\n1,2\n")
    X = io.read_csv(path, header=True)
    np.testing.assert_array_equal(X, [[1, 2]])
    X, y = io.read_csv(path, header=True, label_column="20")
    assert y.tolist() == [2]
    X, y = io.read_csv(write(tmp_path / "s.csv", "a,1\n1,2\n"), header=False, label_column=0)
    assert X.tolist() == [[1], [2]] and y.tolist() == ["a", "1"]


def test_label_dtypes(tmp_path):
    integral = write(tmp_path / "i.csv", "f,c\n1,1.0\n2,2.0\n")
    fractional = write(tmp_path / "f.csv", "f,c\n1,1.5\n2,2\n")
    assert io.read_csv(integral, label_column="c")[1].dtype == np.int64
    y = io.read_csv(fractional, label_column="c")[1]
    assert y.dtype == np.float64 and y.tolist() == [1.5, 2.0]


def test_gzip_is_transparent_with_or_without_suffix(tmp_path):
    text = "a,b\n1,2\n3,4\n"
    plain = io.read_csv(write(tmp_path / "t.csv", text))
    for name in ("t.csv.gz", "t.data"):  # the second is compressed under a plain name
        compressed = write(tmp_path / name, text, compress=True)
        np.testing.assert_array_equal(io.read_csv(compressed), plain)


def test_whitespace_crlf_quotes_and_blank_lines(tmp_path):
    ws = write(tmp_path / "w.dat", "1 2   3\n\n  4\t5 6  \n")
    np.testing.assert_array_equal(io.read_csv(ws), [[1, 2, 3], [4, 5, 6]])
    crlf = write(tmp_path / "c.csv", "a,b,c\r\n1,2,\"p,q\"\r\n\r\n3,4,r\r\n")
    X, y = io.read_csv(crlf, label_column="c")
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert y.tolist() == ["p,q", "r"]


def test_explicit_delimiter_and_integer_dtype(tmp_path):
    path = write(tmp_path / "s.txt", "1;2\n3;4\n")
    X = io.read_csv(path, delimiter=";", dtype=np.int16)
    assert X.dtype == np.int16 and X.tolist() == [[1, 2], [3, 4]]


def test_missing_values_become_nan_and_na_values_extends_the_markers(tmp_path):
    path = write(tmp_path / "m.csv", "1,,3\n4,?,6\n")
    with pytest.raises(ValueError, match=r"line 2, column index 1: '\?' is not a number"):
        io.read_csv(path)
    X = io.read_csv(path, na_values=["?"])
    assert np.isnan(X[:, 1]).all() and X[0, 2] == 3


# --------------------------------------------------------------------------
# read_csv: errors name file, line and fix
# --------------------------------------------------------------------------


def test_ragged_rows_name_the_line(tmp_path):
    # Line numbers count blank lines, as an editor shows them.
    short = write(tmp_path / "short.csv", "a,b,c\n1,2,3\n\n4,5\n")
    with pytest.raises(ValueError, match=r"short\.csv, line 4: found 2 fields but line 1 has 3"):
        io.read_csv(short)
    long = write(tmp_path / "long.csv", "1,2\n3,4,5\n", compress=True)
    with pytest.raises(ValueError, match=r"line 2: found 3 fields .*fix or delete line 2"):
        io.read_csv(long)


def test_ragged_row_line_numbers_across_blocks(tmp_path, monkeypatch):
    # Tiny blocks exercise the block boundaries of the vectorised scan; the
    # quoted line forces the per-line path for its block.
    monkeypatch.setattr(_delimited, "_BLOCK_BYTES", 7)
    lines = ["1,2,3"] * 40 + ['"4",5,6', "", "7,8,9"] + ["1,2,3"] * 10 + ["1,2"]
    path = write(tmp_path / "b.csv", "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"line {len(lines)}: found 2 fields"):
        io.read_csv(path)
    ws = write(tmp_path / "b.dat", "1 2\n" * 30 + "3  4 5\n")
    with pytest.raises(ValueError, match=r"line 31: found 3 fields .*whitespace"):
        io.read_csv(ws)


def test_non_numeric_feature_cell_names_line_column_and_value(tmp_path):
    path = write(tmp_path / "n.csv", "a,b,c\n1,2,3\n\n4,five,6\n7,8,nine\n")
    with pytest.raises(ValueError, match=r"n\.csv, line 4, column index 1 \('b'\): 'five' is not"):
        io.read_csv(path)
    with pytest.raises(ValueError, match=r"line 5, column index 2 \('c'\): 'nine'"):
        io.read_csv(path, label_column="b")


def test_empty_and_header_only_files(tmp_path):
    with pytest.raises(ValueError, match=r"empty\.csv: the file is empty"):
        io.read_csv(write(tmp_path / "empty.csv", ""))
    with pytest.raises(ValueError, match=r"the file is empty"):
        io.read_csv(write(tmp_path / "blank.csv", "\n  \n\n"))
    with pytest.raises(ValueError, match=r"line 2 is a header \(a, b\) and no data rows follow"):
        io.read_csv(write(tmp_path / "h.csv", "\na,b\n\n"))


def test_label_column_errors(tmp_path):
    with_header = write(tmp_path / "h.csv", "a,b\n1,2\n")
    no_header = write(tmp_path / "n.csv", "1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"label_column='z' is not a column .*'a', 'b'"):
        io.read_csv(with_header, label_column="z")
    with pytest.raises(ValueError, match=r"label_column=2 is out of range: .* -2\.\.1"):
        io.read_csv(no_header, label_column=2)
    with pytest.raises(ValueError, match=r"label_column=-3 is out of range"):
        io.read_csv(no_header, label_column=-3)
    with pytest.raises(ValueError, match=r"label_column='a' names a column, but .* no header row"):
        io.read_csv(no_header, label_column="a")
    with pytest.raises(TypeError, match=r"label_column must be a column index"):
        io.read_csv(no_header, label_column=1.0)


def test_missing_label_unknown_category_and_bad_options(tmp_path):
    path = write(tmp_path / "l.csv", "p,q,r\n1,a,x\n2,b,\n")
    with pytest.raises(ValueError, match=r"line 3: the label cell is empty"):
        io.read_csv(path, label_column="r", categorical_columns={"q": ["a", "b"]})
    with pytest.raises(ValueError, match=r"line 3, column index 1 \('q'\): 'b' is not one of"):
        io.read_csv(path, label_column="r", categorical_columns={"q": ["a"]})
    with pytest.raises(ValueError, match=r"dtype=int32 asks for integers"):
        io.read_csv(write(tmp_path / "f.csv", "1.5,2\n"), dtype=np.int32)
    with pytest.raises(ValueError, match=r"outside dtype=int8"):
        io.read_csv(write(tmp_path / "g.csv", "300,2\n"), dtype=np.int8)
    with pytest.raises(ValueError, match=r"delimiter must be None"):
        io.read_csv(path, delimiter=",,")
    with pytest.raises(ValueError, match=r"header must be 'infer'"):
        io.read_csv(path, header="yes")


def test_truncated_gzip(tmp_path):
    payload = gzip.compress(b"1,2\n" * 1000)
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(payload[: len(payload) // 2])
    with pytest.raises(ValueError, match=r"cut\.csv\.gz: the gzip stream is damaged or cut short"):
        io.read_csv(path)


def test_undecodable_bytes_name_the_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"a,b\n1,2\n3,\xe94\n")
    with pytest.raises(ValueError, match=r"latin\.csv, line 3: not valid utf-8 .*encoding="):
        io.read_csv(path)


# --------------------------------------------------------------------------
# Parquet and NumPy readers, read_table
# --------------------------------------------------------------------------


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame(
        {"f0": np.arange(5, dtype=np.int32), "f1": np.linspace(0, 1, 5), "kind": list("aabbc")}
    )
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    X, y = io.read_parquet(path, label_column="kind")
    np.testing.assert_array_equal(X, frame[["f0", "f1"]].to_numpy(np.float32))
    assert y.tolist() == list("aabbc")
    numeric = tmp_path / "n.parquet"
    frame[["f0", "f1"]].to_parquet(numeric)
    X, y = io.read_parquet(numeric, label_column=0)
    assert y.dtype == np.int64 and X.shape == (5, 1)
    with pytest.raises(ValueError, match=r"column 2 \('kind'\) has dtype .*not a number"):
        io.read_parquet(path)
    X, y = io.read_table(path, label_column=-1)
    assert X.shape == (5, 2)


def test_npy_memmap_is_read_only(tmp_path):
    array = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = tmp_path / "a.npy"
    np.save(path, array)
    mapped = io.read_npy(path)
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    np.testing.assert_array_equal(mapped, array)
    with pytest.raises(ValueError):
        mapped[0, 0] = 1
    loaded = io.read_npy(path, mmap=False)
    assert not isinstance(loaded, np.memmap) and loaded.flags.writeable
    X, y = io.read_npy(path, label_column=-1)
    np.testing.assert_array_equal(X, array[:, :2])
    np.testing.assert_array_equal(y, array[:, 2])
    with pytest.raises(ValueError, match=r"label_column=3 is out of range"):
        io.read_npy(path, label_column=3)


def test_npy_errors(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"obj\.npy: cannot read it as a \.npy array"):
        io.read_npy(tmp_path / "obj.npy", mmap=False)
    np.savez(tmp_path / "z.npz", X=np.ones(2))
    with pytest.raises(ValueError, match=r"is an \.npz archive; use read_npz"):
        io.read_npy(tmp_path / "z.npz")


def test_npz_keys(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, X=np.ones((3, 2)), y=np.array([0, 1, 0]), other=np.zeros(1))
    assert io.read_npz(path).shape == (3, 2)  # "X" is the default among several
    X, y = io.read_npz(path, "X", label_key="y")
    assert y.tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match=r"key='Z' is not in .*X, y, other"):
        io.read_npz(path, "Z")
    with pytest.raises(ValueError, match=r"'other' has 1 entries but 'X' has 3 rows"):
        io.read_npz(path, label_key="other")
    np.savez(tmp_path / "two.npz", a=np.ones(1), b=np.ones(1))
    with pytest.raises(ValueError, match=r"holds several arrays \(a, b\); pass key="):
        io.read_npz(tmp_path / "two.npz")


def test_read_table_dispatches_on_extension(tmp_path):
    array = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    np.save(tmp_path / "a.npy", array)
    np.savez(tmp_path / "a.npz", X=array, y=np.array([1, 0]))
    write(tmp_path / "a.csv.gz", "1,2\n3,4\n", compress=True)
    write(tmp_path / "a.data", "1,2\n3,4\n")
    for name in ("a.npy", "a.npz", "a.csv.gz", "a.data"):
        np.testing.assert_array_equal(io.read_table(tmp_path / name), array)
    X, y = io.read_table(tmp_path / "a.npz", label_column="y")
    assert y.tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"cannot tell the format of .*a\.xlsx"):
        io.read_table(tmp_path / "a.xlsx")


# --------------------------------------------------------------------------
# writers
# --------------------------------------------------------------------------


def result_columns():
    return {
        "query": np.arange(3),
        "distance": np.array([[0.1, 1e-5], [np.nan, 2.0], [3.4e38, np.inf]], dtype=np.float32),
        "label": np.array(["a", "b,c", 'd"e']),
    }


def test_write_result_csv_reads_back_exactly(tmp_path):
    columns = result_columns()
    path = io.write_result(tmp_path / "r.csv", columns)
    frame = pd.read_csv(path)
    assert list(frame.columns) == ["query", "distance_0", "distance_1", "label"]
    np.testing.assert_array_equal(
        frame[["distance_0", "distance_1"]].to_numpy(np.float32), columns["distance"]
    )
    assert frame["label"].tolist() == ["a", "b,c", 'd"e']


def test_write_result_json_and_npy(tmp_path):
    columns = result_columns()
    loaded = json.loads((io.write_result(tmp_path / "r.json", columns)).read_text())
    assert loaded["query"] == [0, 1, 2]
    assert loaded["distance"][1] == [None, 2.0] and loaded["distance"][2][1] is None
    assert np.float32(loaded["distance"][0][0]) == np.float32(0.1)
    assert loaded["label"] == ["a", "b,c", 'd"e']
    table = np.load(io.write_result(tmp_path / "r.npy", columns))
    assert table.dtype.names == ("query", "distance", "label")
    np.testing.assert_array_equal(table["distance"], columns["distance"])
    single = np.load(io.write_result(tmp_path / "d.npy", {"distance": columns["distance"]}))
    assert single.shape == (3, 2) and single.dtype == np.float32


def test_write_result_validation(tmp_path):
    with pytest.raises(ValueError, match=r"column 'b' has 2 rows but 'a' has 3"):
        io.write_result(tmp_path / "x.csv", {"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(ValueError, match=r"use a \.csv, \.json or \.npy extension"):
        io.write_result(tmp_path / "x.txt", {"a": np.zeros(3)})
    with pytest.raises(ValueError, match=r"must be 1-D or 2-D"):
        io.write_result(tmp_path / "x.csv", {"a": np.zeros((2, 2, 2))})
    with pytest.raises(FileNotFoundError, match=r"folder .* does not exist"):
        io.write_result(tmp_path / "missing" / "x.csv", {"a": np.zeros(3)})
    assert not list(tmp_path.iterdir())


class ExplodingCell:
    def __str__(self):
        raise RuntimeError("disk on fire")


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_failure_mid_write_leaves_no_partial_file(tmp_path, monkeypatch, suffix):
    # Two rows per chunk: the first chunks reach the temporary file before
    # the bad cell in the last row raises.
    monkeypatch.setattr(_writers, "_CHUNK_ROWS", 2)
    target = tmp_path / f"out{suffix}"
    target.write_text("previous result\n")
    cells = np.array([1, 2, 3, 4, ExplodingCell()], dtype=object)
    with pytest.raises(RuntimeError, match="disk on fire"):
        io.write_result(target, {"id": np.arange(5), "cell": cells})
    assert target.read_text() == "previous result\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary left behind
    target.unlink()
    with pytest.raises(RuntimeError):
        io.write_result(target, {"cell": cells})
    assert not list(tmp_path.iterdir())


def test_write_array_and_atomic_open(tmp_path):
    array = np.array([[1.5, 2.0], [3.0, 4.25]], dtype=np.float32)
    np.testing.assert_array_equal(np.load(io.write_array(tmp_path / "a.npy", array)), array)
    np.testing.assert_array_equal(io.read_csv(io.write_array(tmp_path / "a.csv", array)), array)
    with pytest.raises(ValueError, match=r"writes \.npy or \.csv"):
        io.write_array(tmp_path / "a.json", array)
    target = tmp_path / "t.txt"
    with pytest.raises(KeyError):
        with io.atomic_open(target) as fh:
            fh.write("half")
            raise KeyError("boom")
    assert not target.exists()
    assert oct(os.stat(tmp_path / "a.npy").st_mode & 0o777) == oct(_atomic._FILE_MODE)


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


def test_a_wide_numeric_file_reads_in_one_conversion(tmp_path):
    """Thousands of columns: the same values as NumPy's reader, NaN kept, the label column as text."""
    from gpumine.io import read_csv

    rng = np.random.default_rng(0)
    X = rng.random((4, 5000)).round(5)
    X[2, 17] = np.nan
    lines = [",".join("nan" if np.isnan(v) else repr(float(v)) for v in row) + f",c{i}" for i, row in enumerate(X)]
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(lines) + "\n")
    got, labels = read_csv(path, label_column=-1, dtype=np.float64)
    np.testing.assert_array_equal(got, X)
    assert got.flags.c_contiguous and list(labels) == ["c0", "c1", "c2", "c3"]
    np.testing.assert_array_equal(read_csv(path, label_column=-1)[0], X.astype(np.float32))


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("label_column", [None, 0, "c1"])
def test_very_wide_files_read_as_the_pandas_path_reads_them(tmp_path, monkeypatch, compressed, label_column):
    # past _WIDE_FIELDS columns NumPy's reader takes over; it must give the same arrays
    rng = np.random.default_rng(0)
    n_fields = _delimited._WIDE_FIELDS + 7
    values = rng.random((3, n_fields))
    values[:, 0] = [2, 0, 1]
    header = ",".join(f"c{j}" for j in range(n_fields)) + "\n"
    text = header + "\n".join(",".join(repr(float(v)) for v in row) for row in values) + "\n\n"
    path = tmp_path / "wide.csv"
    path.write_bytes(gzip.compress(text.encode()) if compressed else text.encode())
    wide = io.read_csv(path, label_column=label_column)
    monkeypatch.setattr(_delimited, "_WIDE_FIELDS", 10**9)  # the pandas path
    narrow = io.read_csv(path, label_column=label_column)
    if label_column is None:
        np.testing.assert_array_equal(wide, narrow)
    else:
        for a, b in zip(wide, narrow):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype


def test_a_very_wide_file_with_a_bad_cell_still_names_its_line_and_column(tmp_path):
    n_fields = _delimited._WIDE_FIELDS + 1
    row = ["1.5"] * n_fields
    row[4000] = "oops"
    (tmp_path / "w.csv").write_text(",".join(["0.5"] * n_fields) + "\n" + ",".join(row) + "\n")
    with pytest.raises(ValueError, match=r"line 2, column index 4000: 'oops' is not a number"):
        io.read_csv(tmp_path / "w.csv")


def test_one_line_of_a_hundred_thousand_columns_reads_in_seconds(tmp_path):
    import time

    values = np.random.default_rng(1).random(100_000)
    (tmp_path / "line.csv").write_text(",".join(f"{v:.6f}" for v in values) + "\n")
    start = time.process_time()  # CPU time: other jobs on the machine don't count
    X = io.read_csv(tmp_path / "line.csv")
    assert X.shape == (1, 100_000)
    np.testing.assert_allclose(X[0], values, atol=1e-6)
    assert time.process_time() - start < 5.0  # the per-column pandas frame took 10-60 s


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
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["gpumine"]
    package = Path(__file__).resolve().parents[1] / "src" / "gpumine"
    shipped = {p for pattern in globs for p in package.glob(pattern)}
    assert Path(_datasets.__file__).parent / "samples" / "covtype_sample.csv.gz" in shipped
