"""Where data lives: the shared real-data folder and the download cache."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["find_data_dir", "get_data_home"]

DATA_DIR_ENV = "GPUMINE_DATA_DIR"
DATA_HOME_ENV = "GPUMINE_HOME"


def _ancestors(start: Path):
    start = start.resolve()
    yield start
    yield from start.parents


def find_data_dir() -> Path | None:
    """Locate the shared folder of real data sets (``shared/data``).

    The search order is:

    1. the environment variable ``GPUMINE_DATA_DIR`` (used as given);
    2. ``<ancestor>/shared/data`` for the current working directory and each
       of its parents;
    3. the same walk starting from this package's own location, so an
       editable install at ``<root>/main`` finds ``<root>/shared/data``
       whatever the working directory.

    Returns
    -------
    pathlib.Path or None
        The folder, or ``None`` when none exists. Tests use ``None`` to skip
        with a reason rather than fail.

    Examples
    --------
    >>> folder = find_data_dir()
    >>> folder is None or (folder / "README.md").exists()
    True
    """
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        folder = Path(configured).expanduser()
        if folder.is_dir():
            return folder.resolve()
        # An explicit setting that points nowhere is almost always a typo;
        # say so instead of quietly picking up some other folder.
        warnings.warn(
            f"{DATA_DIR_ENV}={configured!r} is not a folder; ignoring it. "
            "Point it at the folder that holds covertype/, kddcup99/, ...",
            stacklevel=2,
        )
        return None
    starts = [Path(__file__).parent]
    try:
        starts.insert(0, Path.cwd())
    except OSError:  # the working directory was deleted under us
        pass
    for start in starts:
        for ancestor in _ancestors(start):
            candidate = ancestor / "shared" / "data"
            if candidate.is_dir():
                return candidate
    return None


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Return (and create) the folder where downloaded files are cached.

    Parameters
    ----------
    data_home : str or path-like, optional
        Explicit folder. Defaults to ``$GPUMINE_HOME`` if set, else
        ``~/.cache/gpumine``.

    Returns
    -------
    pathlib.Path
        An existing folder.
    """
    if data_home is None:
        data_home = os.environ.get(DATA_HOME_ENV) or Path.home() / ".cache" / "gpumine"
    folder = Path(data_home).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return folder
