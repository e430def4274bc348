"""The benchmark suites' --help states each default once, in words (no Python None, False or list reprs)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = sorted(path.stem for path in (ROOT / "benchmarks").glob("*.py") if not path.stem.startswith("_"))


@pytest.mark.parametrize("suite", SUITES)
def test_suite_help_states_defaults_in_words(suite):
    run = subprocess.run([sys.executable, "-m", f"benchmarks.{suite}", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())
    for raw in ("(default: None)", "(default: False)", "(default: True)", "(default: ["):
        assert raw not in text, f"python -m benchmarks.{suite} --help shows {raw}"
    assert not re.search(r"\(default[ :][^()]*\) \(default: ", text), f"benchmarks.{suite}: a default stated twice"


def test_the_shared_formatter_writes_lists_in_words():
    import argparse

    from benchmarks._common import DefaultsHelpFormatter

    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--peers", default=["torch", "sklearn"], help="peers to time")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs (default 5)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row")
    text = " ".join(parser.format_help().split())
    assert "peers to time (default: torch, sklearn)" in text
    assert "timed runs (default 5) --quick" in text and "tiny sizes (default" not in text
    assert "per row (default: 10.0)" in text
