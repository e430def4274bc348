"""Make the small real-data samples shipped in ``src/gpumine/datasets/samples/``.

Reproducible: a fixed seed, rows copied byte for byte from the source, and a
gzip header without a timestamp, so running it again gives identical bytes.

    python benchmarks/make_samples.py            # write the samples
    python benchmarks/make_samples.py --check    # verify the shipped ones match

Source: the shared derived 16 % Covertype sample (``covertype/covtype.
ramp16pct.reconstructed.data.gz`` in the shared data folder; set
``GPUMINE_DATA_DIR`` if it is not found).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
from pathlib import Path

import numpy as np

if not __package__:  # run as a script (python benchmarks/make_samples.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

from gpumine.datasets import find_data_dir  # noqa: E402
from gpumine.io import atomic_open  # noqa: E402

SEED = 20_240_601
COVTYPE_SAMPLE_ROWS = 6_000
SAMPLES = Path(__file__).resolve().parents[1] / "src" / "gpumine" / "datasets" / "samples"
COVTYPE_SOURCE = "covertype/covtype.ramp16pct.reconstructed.data.gz"


def stratified_indices(labels: np.ndarray, n_total: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of a sample of ``n_total`` rows with each class in proportion.

    Quotas are rounded by the largest-remainder method so they sum to
    ``n_total`` exactly; every class present keeps at least one row.
    """
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * n_total / counts.sum()
    quotas = np.maximum(np.floor(exact).astype(int), 1)
    shortfall = n_total - quotas.sum()
    if shortfall > 0:
        quotas[np.argsort(-(exact - np.floor(exact)), kind="stable")[:shortfall]] += 1
    chosen = [
        rng.choice(np.flatnonzero(labels == c), size=q, replace=False)
        for c, q in zip(classes, quotas)
    ]
    # File order, so the sample reads like the source.
    return np.sort(np.concatenate(chosen))


def make_covtype_sample(data_dir: Path) -> bytes:
    with gzip.open(data_dir / COVTYPE_SOURCE, "rb") as fh:
        lines = [line for line in fh.read().split(b"\n") if line.strip()]
    labels = np.array([int(line.rsplit(b",", 1)[1]) for line in lines])
    rows = stratified_indices(labels, COVTYPE_SAMPLE_ROWS, np.random.default_rng(SEED))
    text = b"".join(lines[i] + b"\n" for i in rows)
    # mtime=0 and no file name in the header: identical bytes on every run.
    return gzip.compress(text, compresslevel=9, mtime=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files")
    args = parser.parse_args(argv)
    data_dir = find_data_dir()
    if data_dir is None or not (data_dir / COVTYPE_SOURCE).is_file():
        print(f"shared data not found ({COVTYPE_SOURCE}); set GPUMINE_DATA_DIR", file=sys.stderr)
        return 2
    target = SAMPLES / "covtype_sample.csv.gz"
    payload = make_covtype_sample(data_dir)
    digest = hashlib.sha256(payload).hexdigest()
    if args.check:
        same = target.is_file() and target.read_bytes() == payload
        print(f"{target.name}: {'matches' if same else 'DIFFERS'} (sha256 {digest})")
        return 0 if same else 1
    with atomic_open(target, "wb") as fh:
        fh.write(payload)
    print(f"wrote {target} ({len(payload):,} bytes, sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
