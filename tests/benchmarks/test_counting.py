"""The counting benchmark's itemsets section: gpumine beside pyfim and mlxtend, at a support giving enough itemsets."""

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "counting.py"
SMALL = dict(sizes=(3000, 60), target=2000)


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(BENCH))


def test_itemsets_are_timed_beside_pyfim_and_mlxtend(bench, capsys):
    if importlib.util.find_spec("fim") is None:
        pytest.skip("pyfim is not installed (pip install pyfim); the skip branch is tested below")
    (e,) = bench["bench_itemsets"](torch.device("cpu"), True, True, **SMALL)
    assert e["target_reached"] and e["itemsets"] >= 2000
    for algo in ("eclat", "fpgrowth", "apriori"):
        assert e["times_s"][f"pyfim_{algo}_cpu"] > 0
        assert e[f"pyfim_{algo}_identical"] is True
    assert e["pyfim_itemsets"] == e["itemsets"]
    assert e["pyfim"].startswith("pyfim ") and e["pyfim_best"] in ("eclat", "fpgrowth", "apriori")
    assert e["speedup_vs_pyfim"] == pytest.approx(e["times_s"][f"pyfim_{e['pyfim_best']}_cpu"] / e["times_s"]["gpumine"])
    if importlib.util.find_spec("mlxtend") is not None:
        assert e["identical_to_mlxtend"] is True and e["times_s"]["mlxtend_fpgrowth_cpu"] > 0
    assert f"pyfim {e['pyfim_best']} " in capsys.readouterr().out


def test_without_pyfim_its_rows_are_skipped_with_a_note(bench, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fim", None)  # import fim raises ImportError
    (e,) = bench["bench_itemsets"](torch.device("cpu"), True, True, **SMALL)
    assert e["pyfim"].startswith("skipped: not installed")
    assert not any(k.startswith("pyfim_") for k in e["times_s"])
    assert "pyfim rows skipped: not installed" in capsys.readouterr().out
    assert e["times_s"]["gpumine"] > 0


def test_an_unreached_itemset_target_is_reported(bench, capsys):
    (e,) = bench["bench_itemsets"](torch.device("cpu"), True, False, sizes=(500, 12), target=10**9)
    assert e["target_reached"] is False and e["min_support"] == 0.001
    assert "no support tried gives" in capsys.readouterr().out


def test_c45_phases_split_one_fit_and_leave_the_tree_unchanged(bench):
    from gpumine.counting import C45Classifier
    from gpumine.datasets import make_poker_hands

    X, y = make_poker_hands(3000, seed=2)
    model = C45Classifier(device="cpu")
    phases = bench["c45_phases"](model, X, y, torch.device("cpu"))
    assert phases["grow"] > 0 and phases["prune"] > 0 and phases["rest"] >= 0
    assert phases["grow"] + phases["prune"] + phases["rest"] == pytest.approx(phases["total"])
    assert model.export_text() == C45Classifier(device="cpu").fit(X, y).export_text()
