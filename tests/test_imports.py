"""Every module imports with only the core dependencies (the optional extras blocked)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "import_every_module.py"
OPTIONAL = ["triton", "pyarrow", "mlxtend", "matplotlib", "dask", "distributed", "faiss", "cupy", "pytest", "hypothesis"]


def test_every_module_imports_without_optional_extras():
    run = subprocess.run([sys.executable, str(SCRIPT), "--block", *OPTIONAL], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "imported" in run.stdout


def test_a_missing_triton_kernel_fails_clearly_when_launched():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "from gpumine.counting import _triton\n"
        "import torch\n"
        "try:\n"
        "    _triton.and_count_matrix(torch.zeros((1, 1), dtype=torch.int64), torch.zeros((1, 1), dtype=torch.int64))\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "ImportError:" in run.stdout and "triton" in run.stdout, run.stdout + run.stderr
