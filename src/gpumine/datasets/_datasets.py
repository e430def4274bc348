"""Loaders for the real data sets the seed papers use.

Each ``load_*`` loader takes ``path=`` to the publisher's file, so the full
originals work; without a path it looks in the shared data folder (see
:func:`gpumine.datasets.find_data_dir`), and raises ``FileNotFoundError`` naming
what it looked for when the file is not there. ``fetch_*`` downloads (once, into
the cache of :func:`gpumine.datasets.get_data_home`), as scikit-learn names them.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import numpy as np

from ._download import fetch_file
from ._paths import find_data_dir, get_data_home
from ..io._readers import WHITESPACE, _read_delimited, read_npz

__all__ = [
    "fetch_covtype",
    "load_covtype",
    "load_covtype_sample",
    "load_kddcup99",
    "load_poker_hand",
    "load_adbench",
    "load_physics",
    "KDD_PROTOCOL_TYPES",
    "KDD_SERVICES",
    "KDD_FLAGS",
    "KDD_FEATURE_NAMES",
    "COVTYPE_URL",
]

COVTYPE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz"
_COVTYPE_ROWS = 581_012
_COVTYPE_FEATURES = 54

# Fixed category orders for KDD Cup 99's text columns, sorted with Python's
# sorted() (upper case first). The services are the 70 of the full training
# data (the 10 % file lacks aol, harvest, http_2784 and http_8001) plus
# "icmp", which only the labelled test set ("corrected") uses. A fixed order
# gives every file the same codes, so a model fitted on one can score another.
KDD_PROTOCOL_TYPES = ("icmp", "tcp", "udp")
KDD_SERVICES = (
    "IRC", "X11", "Z39_50", "aol", "auth", "bgp", "courier", "csnet_ns", "ctf", "daytime",
    "discard", "domain", "domain_u", "echo", "eco_i", "ecr_i", "efs", "exec", "finger", "ftp",
    "ftp_data", "gopher", "harvest", "hostnames", "http", "http_2784", "http_443", "http_8001",
    "icmp", "imap4", "iso_tsap", "klogin", "kshell", "ldap", "link", "login", "mtp", "name",
    "netbios_dgm", "netbios_ns", "netbios_ssn", "netstat", "nnsp", "nntp", "ntp_u", "other",
    "pm_dump", "pop_2", "pop_3", "printer", "private", "red_i", "remote_job", "rje", "shell",
    "smtp", "sql_net", "ssh", "sunrpc", "supdup", "systat", "telnet", "tftp_u", "tim_i", "time",
    "urh_i", "urp_i", "uucp", "uucp_path", "vmnet", "whois",
)  # fmt: skip
KDD_FLAGS = ("OTH", "REJ", "RSTO", "RSTOS0", "RSTR", "S0", "S1", "S2", "S3", "SF", "SH")
# The 41 feature names, in file order, from the publisher's kddcup.names.
KDD_FEATURE_NAMES = (
    "duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land",
    "wrong_fragment", "urgent", "hot", "num_failed_logins", "logged_in", "num_compromised",
    "root_shell", "su_attempted", "num_root", "num_file_creations", "num_shells",
    "num_access_files", "num_outbound_cmds", "is_host_login", "is_guest_login", "count",
    "srv_count", "serror_rate", "srv_serror_rate", "rerror_rate", "srv_rerror_rate",
    "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate", "dst_host_count",
    "dst_host_srv_count", "dst_host_same_srv_rate", "dst_host_diff_srv_rate",
    "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate", "dst_host_serror_rate",
    "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate",
)  # fmt: skip

_SHARED_FILES = {
    "covtype": "covertype/covtype.ramp16pct.reconstructed.data.gz",
    "kddcup99/10_percent": "kddcup99/kddcup.data_10_percent.gz",
    "kddcup99/corrected": "kddcup99/corrected.gz",
    "poker_hand/train": "poker_hand/poker-hand-training-true.data",
    "poker_hand/test_first99999": "poker_hand/poker-hand-testing.first99999.data.gz",
}


def _shared_file(key: str, advice: str) -> Path:
    relative = _SHARED_FILES[key]
    folder = find_data_dir()
    if folder is not None and (folder / relative).is_file():
        return folder / relative
    where = f"in {folder}" if folder is not None else "(no shared data folder found)"
    raise FileNotFoundError(
        f"{relative} is not available {where}. {advice} Or set GPUMINE_DATA_DIR to the "
        "folder that holds it."
    )


def _check_labels(y: np.ndarray, allowed: range, path, name: str) -> None:
    if y.dtype.kind not in "iu" or y.min() < allowed.start or y.max() >= allowed.stop:
        seen = np.unique(y)[:10]
        raise ValueError(
            f"{path}: {name} labels must be integers {allowed.start}..{allowed.stop - 1}; found "
            f"{seen.tolist()}{' ...' if np.unique(y).size > 10 else ''}. Is this the right file?"
        )


def _check_n_features(n_features, maximum: int) -> int:
    if isinstance(n_features, bool) or not isinstance(n_features, int | np.integer):
        raise TypeError(f"n_features must be an int in 1..{maximum}; got {n_features!r}.")
    if not 1 <= n_features <= maximum:
        raise ValueError(f"n_features must be in 1..{maximum}; got {n_features}.")
    return int(n_features)


def fetch_covtype(
    *,
    data_home=None,
    download_if_missing: bool = True,
    n_features: int = _COVTYPE_FEATURES,
    dtype=np.float32,
):
    """Download UCI Covertype into the cache if needed, and load it (Blackard 1998, doi:10.24432/C50K5N, CC BY 4.0).

    The full original (581,012 rows, :data:`COVTYPE_URL`) is downloaded once
    into the cache folder (:func:`gpumine.datasets.get_data_home`) and read
    from there afterwards. UCI publishes no checksum for this file and we could
    not confirm one, so instead of a made-up hash the file is checked by
    content: it must parse as 581,012 rows of 55 columns with cover types 1-7.
    The format is described in :func:`load_covtype`, which reads a local copy.

    Parameters
    ----------
    data_home : str or path-like, optional
        Download cache folder (see :func:`gpumine.datasets.fetch_file`).
    download_if_missing : bool, default True
        When False and the file is not in the cache yet, raise ``OSError``
        instead of downloading.
    n_features : int, default 54
        Keep the first ``n_features`` columns; 10 gives the quantitative
        attributes that distance-based methods (and the seed papers) use.
    dtype : NumPy dtype, default float32

    Returns
    -------
    X : ndarray of shape (581012, n_features)
    y : ndarray of shape (581012,), int64
        Cover types 1-7.

    Raises
    ------
    OSError
        If the download fails (the message says how to fetch the file
        elsewhere and pass its path to :func:`load_covtype`), or if
        ``download_if_missing`` is False and the file is not cached.
    ValueError
        If the file does not have UCI's rows, columns or cover types.

    See Also
    --------
    load_covtype : the same data from a local file (or the shared sample).
    """
    n_features = _check_n_features(n_features, _COVTYPE_FEATURES)
    if not download_if_missing:
        cached = get_data_home(data_home) / Path(COVTYPE_URL).name
        if not cached.is_file():
            raise OSError(
                f"{cached} is not in the download cache and download_if_missing=False; call "
                "fetch_covtype() to download it, or pass a local covtype.data(.gz) to load_covtype(path)."
            )
    path = fetch_file(COVTYPE_URL, sha256=None, data_home=data_home)
    X, y = _read_covtype(path, dtype)
    if len(X) != _COVTYPE_ROWS:
        raise ValueError(
            f"{path}: the download has {len(X)} rows, but UCI's covtype.data has "
            f"{_COVTYPE_ROWS}; delete it and retry."
        )
    return np.ascontiguousarray(X[:, :n_features]), y


def load_covtype(
    path=None,
    *,
    download: bool = False,
    data_home=None,
    n_features: int = _COVTYPE_FEATURES,
    dtype=np.float32,
):
    """Load UCI Covertype from a local file (Blackard 1998, doi:10.24432/C50K5N, CC BY 4.0).

    The file format is UCI's ``covtype.data``: no header, 55 comma-separated
    integers per row; columns 0-9 are quantitative (elevation, aspect, ...),
    10-53 binary (4 wilderness areas, 40 soil types), column 54 the cover
    type 1-7.

    Parameters
    ----------
    path : str or path-like, optional
        ``covtype.data`` or ``covtype.data.gz`` (the full 581,012 rows, or any
        file in the same format).
    download : bool, default False
        When ``path`` is None, download the full original instead: the same
        as :func:`fetch_covtype` (the downloader, named as scikit-learn names
        downloaders), which this keeps working for code written before it.
    data_home : str or path-like, optional
        Download cache folder (see :func:`gpumine.datasets.fetch_file`).
    n_features : int, default 54
        Keep the first ``n_features`` columns; 10 gives the quantitative
        attributes that distance-based methods (and the seed papers) use.
    dtype : NumPy dtype, default float32

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,), int64
        Cover types 1-7.

    See Also
    --------
    fetch_covtype : download the full original into the cache, then load it.

    Notes
    -----
    With neither ``path`` nor ``download`` the loader uses the shared
    *derived* 16 % stratified sample (92,962 rows) in the shared data folder.
    ``download=True`` takes precedence over that sample.
    """
    n_features = _check_n_features(n_features, _COVTYPE_FEATURES)
    if path is None and download:
        return fetch_covtype(data_home=data_home, n_features=n_features, dtype=dtype)
    if path is None:
        path = _shared_file(
            "covtype", "Pass path= to UCI's covtype.data(.gz), or call fetch_covtype() to download it."
        )
    X, y = _read_covtype(path, dtype)
    return np.ascontiguousarray(X[:, :n_features]), y


def _read_covtype(path, dtype):
    X, y = _read_delimited(
        path,
        label_column=_COVTYPE_FEATURES,
        header=False,
        delimiter=",",
        dtype=dtype,
        expected_fields=_COVTYPE_FEATURES + 1,
        what="UCI covtype.data",
    )
    _check_labels(y, range(1, 8), path, "cover type")
    return X, y


def load_covtype_sample(n_features: int = 10, *, dtype=np.float32):
    """Load the Covertype sample shipped with gpumine (works without any data folder).

    6,000 rows drawn, stratified by class and seeded, from the shared 16 %
    Covertype sample; ``benchmarks/make_samples.py`` made it. The format is
    UCI's ``covtype.data`` (see :func:`load_covtype`); the citation is in
    ``gpumine/datasets/samples/README.md``.

    Parameters
    ----------
    n_features : int, default 10
        Keep the first ``n_features`` columns (1-54); the default keeps the 10
        quantitative attributes.
    dtype : NumPy dtype, default float32

    Returns
    -------
    X : ndarray of shape (6000, n_features)
    y : ndarray of shape (6000,), int64
        Cover types 1-7.

    Examples
    --------
    >>> X, y = load_covtype_sample()
    >>> X.shape, X.dtype, sorted(set(y.tolist()))
    ((6000, 10), dtype('float32'), [1, 2, 3, 4, 5, 6, 7])
    """
    n_features = _check_n_features(n_features, _COVTYPE_FEATURES)
    resource = resources.files("gpumine.datasets").joinpath("samples", "covtype_sample.csv.gz")
    with resources.as_file(resource) as path:
        X, y = _read_delimited(
            path,
            label_column=_COVTYPE_FEATURES,
            header=False,
            delimiter=",",
            dtype=dtype,
            expected_fields=_COVTYPE_FEATURES + 1,
            what="UCI covtype.data",
        )
    return np.ascontiguousarray(X[:, :n_features]), y


def load_kddcup99(path=None, subset: str = "10_percent", *, dtype=np.float32):
    """Load KDD Cup 1999 network connections (Stolfo et al. 1999, doi:10.24432/C51C7N).

    Parameters
    ----------
    path : str or path-like, optional
        A file in the publisher's format: no header, 42 comma-separated
        fields, the last the label. ``kddcup.data(.gz)`` (4.9M rows) works as
        well as the 10 % file and ``corrected``. When given, ``subset`` is
        ignored.
    subset : {"10_percent", "corrected"}, default "10_percent"
        Which shared file to load when ``path`` is None: the 10 % training
        set (494,021 rows) or the labelled test set (311,029 rows).
    dtype : NumPy dtype, default float32

    Returns
    -------
    X : ndarray of shape (n_rows, 41)
        Columns in file order (:data:`KDD_FEATURE_NAMES`). The three text
        columns are integer codes: ``protocol_type`` (column 1) indexes
        :data:`KDD_PROTOCOL_TYPES`, ``service`` (2) indexes
        :data:`KDD_SERVICES`, ``flag`` (3) indexes :data:`KDD_FLAGS`. These
        orders are fixed (sorted names), so codes agree across files.
    y : ndarray of shape (n_rows,), str
        The labels as written, with their trailing dot: ``"normal."``,
        ``"smurf."``, ...

    Raises
    ------
    ValueError
        If a text column holds a value outside the fixed lists (with its line).
    """
    if path is None:
        if subset not in ("10_percent", "corrected"):
            raise ValueError(
                f"subset must be '10_percent' or 'corrected'; got {subset!r}. For the full "
                "kddcup.data, pass path=."
            )
        path = _shared_file(
            f"kddcup99/{subset}", "Pass path= to the publisher's kddcup.data_10_percent.gz."
        )
    X, y = _read_delimited(
        path,
        label_column=41,
        header=False,
        delimiter=",",
        dtype=dtype,
        categorical_columns={1: KDD_PROTOCOL_TYPES, 2: KDD_SERVICES, 3: KDD_FLAGS},
        expected_fields=42,
        what="KDD Cup 99 (41 features + label)",
    )
    return X, y.astype(str, copy=False)


def load_poker_hand(path=None, subset: str = "train", *, dtype=np.float32):
    """Load UCI Poker Hand (Cattral & Oppacher 2007, doi:10.24432/C5KW38).

    Parameters
    ----------
    path : str or path-like, optional
        A file in the publisher's format (11 comma-separated integers, no
        header), e.g. the full 1,000,000-row ``poker-hand-testing.data``. When
        given, ``subset`` is ignored.
    subset : {"train", "test_first99999"}, default "train"
        Which shared file to load when ``path`` is None: the 25,010-row
        training set, or the first 99,999 rows of the test set (a *derived*
        file). For a test set of a million hands with the same distribution,
        see :func:`gpumine.datasets.make_poker_hands`.
    dtype : NumPy dtype, default float32
        Dtype of ``X``; integer dtypes work too (every attribute is integral).

    Returns
    -------
    X : ndarray of shape (n_rows, 10)
        Suit (1-4) and rank (1-13) of each of the five cards: S1, C1, ..., S5, C5.
    y : ndarray of shape (n_rows,), int64
        Hand class 0-9 (0 nothing ... 9 royal flush).
    """
    if path is None:
        if subset not in ("train", "test_first99999"):
            raise ValueError(
                f"subset must be 'train' or 'test_first99999'; got {subset!r}. For the full "
                "test set, pass path= to poker-hand-testing.data."
            )
        path = _shared_file(
            f"poker_hand/{subset}", "Pass path= to the publisher's poker-hand-*.data file."
        )
    X, y = _read_delimited(
        path,
        label_column=10,
        header=False,
        delimiter=",",
        dtype=dtype,
        expected_fields=11,
        what="UCI Poker Hand (10 attributes + class)",
    )
    _check_labels(y, range(0, 10), path, "poker hand")
    return X, y


def load_adbench(name: str, path=None, *, dtype=np.float32):
    """Load an ADBench "classical" outlier-detection set (Han et al., NeurIPS 2022).

    Parameters
    ----------
    name : str
        The file's name without ``.npz``, e.g. ``"10_cover"`` or ``"16_http"``;
        the part after the number (``"cover"``) is accepted when unambiguous.
    path : str or path-like, optional
        The ``.npz`` file itself, or a folder holding ``<name>.npz``. Default:
        ``adbench/`` in the shared data folder.
    dtype : NumPy dtype, default float32
        Dtype of ``X`` (the files store int16 or float64).

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,), int64
        1 for an anomaly, 0 for a normal point.

    Notes
    -----
    Many of these sets hold exact duplicate rows (most ``16_http`` anomalies
    have five or more copies).
    """
    if path is not None and Path(os.fspath(path)).is_file():
        file = Path(os.fspath(path))
    else:
        if path is not None:
            folder = Path(os.fspath(path))
            if not folder.is_dir():
                raise FileNotFoundError(f"path={str(path)!r} is neither an .npz file nor a folder.")
        else:
            data = find_data_dir()
            folder = data / "adbench" if data is not None else None
            if folder is None or not folder.is_dir():
                raise FileNotFoundError(
                    "no adbench/ folder in the shared data folder "
                    f"({data or 'none found'}); pass path= to the .npz file, or set "
                    "GPUMINE_DATA_DIR."
                )
        file = _adbench_member(folder, name)
    X, y = read_npz(file, "X", label_key="y")
    if y.ndim != 1 or not np.isin(y, (0, 1)).all():
        raise ValueError(f"{file}: 'y' must be a 1-D array of 0/1 anomaly labels.")
    return np.asarray(X, dtype=dtype), y.astype(np.int64, copy=False)


def _adbench_member(folder: Path, name: str) -> Path:
    exact = folder / f"{name}.npz"
    if exact.is_file():
        return exact
    available = sorted(p.stem for p in folder.glob("*.npz"))
    matches = [stem for stem in available if stem.partition("_")[2].lower() == name.lower()]
    if len(matches) == 1:
        return folder / f"{matches[0]}.npz"
    raise ValueError(
        f"no ADBench set named {name!r} in {folder}"
        + (f" ({name!r} matches {matches})" if matches else "")
        + f"; available: {', '.join(available) or 'none'}."
    )


def load_physics(path, *, return_ids: bool = False, dtype=np.float32):
    """Load the KDD Cup 2004 particle-physics training set (``phy_train.dat``).

    No copy ships with gpumine or the shared data; pass the publisher's file.

    Layout assumed (the publisher's ``phy_train.dat``): one example per line,
    80 whitespace-separated numeric fields: ``EXAMPLE ID``, the class (0 or
    1), then the 78 features; 50,000 lines, no header. Values are returned as
    written, with no decoding of missing-value codes.

    Parameters
    ----------
    path : str or path-like
        ``phy_train.dat`` (plain or gzip-compressed).
    return_ids : bool, default False
        Also return the example ids.
    dtype : NumPy dtype, default float32

    Returns
    -------
    X : ndarray of shape (n_rows, 78)
    y : ndarray of shape (n_rows,), int64
        Class 0/1.
    ids : ndarray of shape (n_rows,), int64
        Only with ``return_ids=True``.
    """
    table, y = _read_delimited(
        path,
        label_column=1,
        header=False,
        delimiter=WHITESPACE,
        dtype=np.float64,
        expected_fields=80,
        what="KDD Cup 2004 phy_train.dat (id, class, 78 features)",
    )
    _check_labels(y, range(0, 2), path, "physics class")
    X = np.ascontiguousarray(table[:, 1:], dtype=dtype)
    if not return_ids:
        return X, y
    ids = table[:, 0]
    return X, y, ids.astype(np.int64)
