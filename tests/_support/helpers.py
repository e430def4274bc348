import os
from pathlib import Path

import pytest
import torch

DEVICES = ["cpu"] + [pytest.param("cuda", marks=pytest.mark.gpu)]


def skip_if_no_cuda(device):
    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")


def shared_data_dir():
    """../shared/data beside the checkout (or $GPUMINE_DATA_DIR); None when absent."""
    env = os.environ.get("GPUMINE_DATA_DIR")
    if env and Path(env).is_dir():
        return Path(env)
    for base in [Path(__file__).resolve(), Path.cwd().resolve()]:
        for parent in [base, *base.parents]:
            cand = parent / "shared" / "data"
            if cand.is_dir():
                return cand
    return None


def shared_file(relative):
    root = shared_data_dir()
    if root is None or not (root / relative).exists():
        pytest.skip(f"shared data file {relative} not found (looked for shared/data beside the checkout and $GPUMINE_DATA_DIR)")
    return root / relative


def run_thorough_profile(test_file):
    """Run a property-test file's non-slow tests under the "thorough" hypothesis profile in a child pytest."""
    import subprocess
    import sys

    env = dict(os.environ, GPUMINE_HYPOTHESIS="thorough")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file), "-m", "not slow"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
