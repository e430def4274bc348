"""gpumine.io: the delimited, Parquet and NumPy readers, read_table, the result writers and very wide files."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpumine import io
from gpumine.io import _delimited, _writers
from gpumine.utils import _atomic

# --------------------------------------------------------------------------
# helpers and fixtures
# --------------------------------------------------------------------------


def write(path: Path, text: str, *, compress: bool = False) -> Path:
    payload = text.encode("utf-8")
    path.write_bytes(gzip.compress(payload) if compress else payload)
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
# very wide files
# --------------------------------------------------------------------------


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
