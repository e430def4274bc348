"""Data sets, named as scikit-learn names them: ``load_*`` real data, ``fetch_*`` downloads, ``make_*`` synthetic data.

Loaders take a path to the publisher's file or find it in the shared real-data
folder (:func:`find_data_dir`); downloads (:func:`fetch_covtype`,
:func:`fetch_file`) go to a checked cache (:func:`get_data_home`); generators
are seeded.
"""

from ._datasets import (
    COVTYPE_URL,
    KDD_FEATURE_NAMES,
    KDD_FLAGS,
    KDD_PROTOCOL_TYPES,
    KDD_SERVICES,
    fetch_covtype,
    load_adbench,
    load_covtype,
    load_covtype_sample,
    load_kddcup99,
    load_physics,
    load_poker_hand,
)
from ._download import fetch_file, sha256_of
from ._paths import find_data_dir, get_data_home
from ._synthetic import make_gaussian_blobs, make_poker_hands, make_uniform, poker_hand_labels

__all__ = [
    "load_covtype_sample",
    "load_covtype",
    "fetch_covtype",
    "load_kddcup99",
    "load_poker_hand",
    "load_adbench",
    "load_physics",
    "find_data_dir",
    "get_data_home",
    "fetch_file",
    "sha256_of",
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
