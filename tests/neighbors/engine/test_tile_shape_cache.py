"""The fused kernel's tile-shape cache: keys, atomic writes, merging, and unreadable files."""

import json

import pytest

from gpumine.neighbors.engine import _fused_tuning as knn_tuning


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(knn_tuning.CACHE_ENV, str(tmp_path))
    return tmp_path


def _key(**changes):
    fields = dict(score=2, features=65, block_k=64, tail=1, candidates=8, precision="tf32x3", has_bias=True,
                  exclude_self=False, rotate=False, n_query=12_000)
    fields.update(changes)
    return knn_tuning.shape_class("NVIDIA H200", "3.6.0", **fields)


def test_shape_class_separates_what_the_kernel_is_compiled_for():
    base = _key()
    assert _key() == base
    for change in (dict(features=64), dict(tail=0), dict(candidates=16), dict(precision="tf32"), dict(has_bias=False),
                   dict(exclude_self=True), dict(rotate=True), dict(n_query=1_000_000)):
        assert _key(**change) != base, change
    assert _key(n_query=12_500) == base  # the query count only by its factor-of-four class


def test_recorded_blocks_are_found_again_and_written_atomically(cache_dir):
    key = _key()
    assert knn_tuning.lookup(key) is None
    knn_tuning.record(key, (64, 128, 4), {"64x128x4": 1.0, "64x64x4": 1.5})
    assert knn_tuning.lookup(key) == (64, 128, 4)
    assert [p.name for p in cache_dir.iterdir()] == ["knn_tiles.json"]  # no temporary left behind
    stored = json.loads((cache_dir / "knn_tiles.json").read_text())
    assert stored[key]["blocks"] == [64, 128, 4] and stored[key]["ms"]["64x64x4"] == 1.5


def test_recording_keeps_classes_another_process_wrote(cache_dir):
    knn_tuning.record(_key(), (64, 128, 4), {"64x128x4": 1.0})
    other = _key(candidates=32)
    data = json.loads((cache_dir / "knn_tiles.json").read_text())
    data[other] = {"blocks": [32, 64, 4], "ms": {}}
    (cache_dir / "knn_tiles.json").write_text(json.dumps(data))
    knn_tuning.record(_key(candidates=64), (16, 32, 4), {})
    assert knn_tuning.lookup(other) == (32, 64, 4)
    assert knn_tuning.lookup(_key()) == (64, 128, 4)


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"%s": {"blocks": "64x64"}}'])
def test_an_unreadable_cache_means_untuned_not_an_error(cache_dir, content):
    (cache_dir / "knn_tiles.json").write_text(content.replace("%s", _key()))
    assert knn_tuning.lookup(_key()) is None


def test_tuning_collects_only_inside_its_block():
    assert knn_tuning.tuning_results() is None
    with knn_tuning.tuning() as results:
        assert knn_tuning.tuning_results() is results
    assert knn_tuning.tuning_results() is None


@pytest.mark.parametrize("dot", [True, False])
def test_wide_candidate_lists_get_only_narrow_blocks(dot):
    assert all(block_m <= 32 for block_m, _, _ in knn_tuning.candidate_blocks(dot, 128))
    assert (64, 64, 4) in knn_tuning.candidate_blocks(True, 8)
