"""Runs the Triton kernel cases on the CPU interpreter (a child process, since
TRITON_INTERPRET must be set before the kernels are defined)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")


def _run_interpreted(marks: str, timeout: int, cases: str = "triton_knn_cases.py") -> None:
    here = Path(__file__).resolve().parent
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", marks, str(here / cases)],
        capture_output=True, text=True, env=env, cwd=here.parents[2], timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


on_gpu_natively = pytest.mark.skipif(torch.cuda.is_available(),
                                     reason="on a GPU the cases run natively: pytest tests/neighbors/engine/triton_knn_cases.py")


@on_gpu_natively
def test_fused_kernel_cases_under_the_triton_interpreter():
    # one representative of each kernel path; the interpreter takes seconds per case
    _run_interpreted("not slow", timeout=1200)


@on_gpu_natively
@pytest.mark.slow
def test_every_fused_kernel_case_under_the_triton_interpreter():
    _run_interpreted("slow", timeout=3600)


@on_gpu_natively
@pytest.mark.parametrize("cases,timeout", [
    ("triton_exact_select_cases.py", 600),
    ("triton_product_select_cases.py", 1200),
    ("triton_row_product_cases.py", 600),
    ("triton_float64_rank_cases.py", 600),
    ("triton_data_summary_cases.py", 600),
    ("triton_split_operand_cases.py", 600),
])
def test_kernel_cases_under_the_triton_interpreter(cases, timeout):
    _run_interpreted("not slow", timeout=timeout, cases=cases)
