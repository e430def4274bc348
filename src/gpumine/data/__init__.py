"""Data in and out: readers, writers, real data sets, synthetic generators.

Readers return NumPy arrays (never tensors); writers replace their target
atomically; loaders find the shared real-data folder or take a path to the
publisher's file; generators are seeded.
"""

from ..utils._atomic import atomic_open
from ._datasets import (
    COVTYPE_URL,
    KDD_FEATURE_NAMES,
    KDD_FLAGS,
    KDD_PROTOCOL_TYPES,
    KDD_SERVICES,
    load_adbench,
    load_covtype,
    load_covtype_sample,
    load_kddcup99,
    load_physics,
    load_poker_hand,
)
from ._download import fetch_file, sha256_of
from ._paths import find_data_dir, get_data_home
from ._readers import read_csv, read_npy, read_npz, read_parquet, read_table
from ._synthetic import make_gaussian_blobs, make_poker_hands, make_uniform, poker_hand_labels
from ._writers import check_output_path, write_array, write_result

__all__ = [
    "check_output_path",
    "read_csv",
    "read_parquet",
    "read_npy",
    "read_npz",
    "read_table",
    "write_result",
    "write_array",
    "atomic_open",
    "find_data_dir",
    "get_data_home",
    "fetch_file",
    "sha256_of",
    "load_covtype",
    "load_covtype_sample",
    "load_kddcup99",
    "load_poker_hand",
    "load_adbench",
    "load_physics",
    "make_uniform",
    "make_gaussian_blobs",
    "make_poker_hands",
    "poker_hand_labels",
    "COVTYPE_URL",
    "KDD_PROTOCOL_TYPES",
    "KDD_SERVICES",
    "KDD_FLAGS",
    "KDD_FEATURE_NAMES",
]
