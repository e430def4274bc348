"""One atomic writer: every file the package and the benchmark helpers write goes through utils._atomic.atomic_open.

The downloads cache, the kNN tile-shape cache and the benchmark results used to have their own
temporary-file-and-rename code (mkstemp's 0600 files, a fixed ``.tmp`` name); they now get the writer's
ordinary permissions and its clean-up on failure.
"""

import ast
import hashlib
import json
import os
from pathlib import Path

import pytest

from gpumine import datasets
from gpumine.neighbors.engine import _fused_tuning
from gpumine.utils import _atomic

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "src" / "gpumine" / "utils" / "_atomic.py"
# the benchmark helpers that write results (benchmarks/ is outside the package; these are checked by name)
BENCHMARK_WRITERS = [ROOT / "benchmarks" / name for name in ("_common.py", "counting.py", "cpu_knn.py")]


def _mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def _renames(path: Path, root: Path = ROOT) -> list[str]:
    """Hand-rolled atomic writes in ``path``: calls of mkstemp / NamedTemporaryFile / os.replace / os.rename."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("mkstemp", "NamedTemporaryFile", "replace", "rename") and not (
                name == "replace" and isinstance(func, ast.Attribute) and not _is_os(func.value)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def _is_os(node) -> bool:
    # os.replace / os.rename; str.replace(...) and friends are not renames
    return isinstance(node, ast.Name) and node.id == "os"


def test_no_other_module_renames_a_temporary_file_into_place():
    modules = [p for p in (ROOT / "src" / "gpumine").rglob("*.py") if p != WRITER] + BENCHMARK_WRITERS
    found = [hit for path in modules for hit in _renames(path)]
    assert not found, "write through gpumine.utils._atomic.atomic_open instead: " + "; ".join(found)


def test_the_scan_sees_a_hand_rolled_writer(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("import os, tempfile\nfd, tmp = tempfile.mkstemp()\nos.replace(tmp, 'x')\n'a'.replace('a', 'b')\n")
    assert [hit.split()[-1] for hit in _renames(module, tmp_path)] == ["mkstemp", "replace"]
    assert _renames(WRITER)  # the writer itself does rename


def test_a_download_gets_ordinary_permissions_and_no_temporary(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"gpumine" * 100)
    cache = tmp_path / "cache"
    path = datasets.fetch_file(source.as_uri(), sha256=hashlib.sha256(source.read_bytes()).hexdigest(),
                               data_home=cache)
    assert _mode(path) == _atomic._FILE_MODE  # mkstemp's 0600 before
    assert [p.name for p in cache.iterdir()] == ["source.bin"]


def test_an_unreachable_download_leaves_nothing(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="could not download"):
        datasets.fetch_file((tmp_path / "missing.bin").as_uri(), sha256=None, data_home=cache)
    assert not list(cache.iterdir())


def test_the_tile_cache_is_written_by_the_one_writer(tmp_path, monkeypatch):
    monkeypatch.setenv(_fused_tuning.CACHE_ENV, str(tmp_path))
    calls = []
    real = _fused_tuning.atomic_open
    monkeypatch.setattr(_fused_tuning, "atomic_open", lambda path, mode="w", **kw: calls.append(path) or real(path, mode, **kw))
    key = _fused_tuning.shape_class("cpu", "0", score=2, features=8, block_k=16, tail=0, candidates=8,
                                    precision="ieee", has_bias=False, exclude_self=False, rotate=False, n_query=100)
    _fused_tuning.record(key, (16, 32, 4), {"16x32x4": 1.0})
    assert calls == [tmp_path / "knn_tiles.json"]
    assert _mode(tmp_path / "knn_tiles.json") == _atomic._FILE_MODE
    assert json.loads((tmp_path / "knn_tiles.json").read_text())[key]["blocks"] == [16, 32, 4]


def test_benchmark_results_are_written_by_the_one_writer(tmp_path):
    from benchmarks import _common

    path = _common.write_json(tmp_path / "sub" / "r.json", {"t": float("nan"), "n": 3})
    assert json.loads(path.read_text()) == {"t": None, "n": 3}
    assert _mode(path) == _atomic._FILE_MODE
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]
    assert _common.atomic_open is _atomic.atomic_open
