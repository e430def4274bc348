"""The host products benchmark: its symmetric-products experiment end to end on a small shape."""

import json

from benchmarks import host_products
from gpumine.neighbors.engine import _host_gemm


def test_symmetric_experiment_times_both_ways_and_restores_the_threshold(monkeypatch, tmp_path):
    monkeypatch.setattr(host_products, "SYMMETRIC_SHAPES", [(300, 40)])
    formed = []
    symmetric = _host_gemm._symmetric_products
    monkeypatch.setattr(_host_gemm, "_symmetric_products", lambda *a, **kw: formed.append(1) or symmetric(*a, **kw))
    saved = _host_gemm.SYMMETRIC_MIN_FEATURES
    out = tmp_path / "products.json"
    assert host_products.main(["--out", str(out), "--repeats", "1", "--experiments", "symmetric"]) == 0
    records = json.loads(out.read_text())["records"]
    assert [(r["rows"], r["features"], r["k"]) for r in records] == [(300, 40, 5), (300, 40, 20)]
    assert all(r["blocks_ms"] > 0 and r["symmetric_ms"] > 0 for r in records)
    assert _host_gemm.SYMMETRIC_MIN_FEATURES == saved
    assert formed  # the symmetric runs took the symmetric products
