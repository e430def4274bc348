"""Runs the Triton kernel cases on the CPU interpreter (a child process, since
TRITON_INTERPRET must be set before the kernels are defined)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the cases run natively: pytest tests/triton_knn_cases.py")
def test_fused_kernel_cases_under_the_triton_interpreter():
    here = Path(__file__).parent
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(here / "triton_knn_cases.py")],
        capture_output=True, text=True, env=env, cwd=here.parent, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
