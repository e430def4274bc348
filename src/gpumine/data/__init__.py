"""Kept for compatibility: the names ``gpumine.data`` exported before it was split.

Readers and writers now live in :mod:`gpumine.io`; real data sets, downloads
and synthetic generators in :mod:`gpumine.datasets`. Every name below is the
same object as there, so code that imports it from here keeps working; new
code imports from the new homes.
"""

from ..datasets import (
    COVTYPE_URL,
    KDD_FEATURE_NAMES,
    KDD_FLAGS,
    KDD_PROTOCOL_TYPES,
    KDD_SERVICES,
    fetch_covtype,
    fetch_file,
    find_data_dir,
    get_data_home,
    load_adbench,
    load_covtype,
    load_covtype_sample,
    load_kddcup99,
    load_physics,
    load_poker_hand,
    make_gaussian_blobs,
    make_poker_hands,
    make_uniform,
    poker_hand_labels,
    sha256_of,
)
from ..io import (
    atomic_open,
    check_output_path,
    read_csv,
    read_npy,
    read_npz,
    read_parquet,
    read_table,
    write_array,
    write_result,
)

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
    "fetch_covtype",
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
