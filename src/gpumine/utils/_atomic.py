"""The one atomic writer: a file appears at its path only when complete.

The data go to a temporary file in the destination folder, renamed over the
destination with :func:`os.replace` once flushed to disk: a crash or an
exception mid-write leaves the previous file (or no file) in place, never a
truncated one. Same folder, because a rename is atomic only within one file
system. :mod:`gpumine.io` exports it as ``gpumine.io.atomic_open``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_open"]


def _current_umask() -> int:
    # Read once at import: os.umask can only be read by setting it.
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_current_umask()


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **open_kwargs):
    """Open ``path`` for writing so that it appears only when complete.

    Yields a file object on a temporary file ``.<name>.<random>.tmp`` in the
    same folder. On normal exit the data are flushed to disk and the file is
    renamed to ``path``; on an exception the temporary file is deleted and
    ``path`` is untouched. A symbolic link keeps pointing where it did (its
    target is replaced); a destination that is not a regular file (a device, a
    FIFO, ``/dev/stdout``) is written through, as it cannot be renamed over.

    Parameters
    ----------
    path : str or path-like
        Destination. Its folder must exist.
    mode : {"w", "wb"}, default "w"
    **open_kwargs
        Passed to :func:`open` (e.g. ``encoding``, ``newline``).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_open(target) as fh:
    ...     _ = fh.write("done\\n")
    >>> target.read_text()
    'done\\n'
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb'; got {mode!r}.")
    path = Path(os.fspath(path))
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    if path.is_symlink():  # the link stays; its target is replaced
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        # a device, a FIFO or /dev/stdout cannot be renamed over: written through, as a shell would
        with open(path, mode, **open_kwargs) as fh:
            yield fh
        return
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(
            f"cannot write {path}: folder {folder} does not exist; create it first."
        )
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600 files; give the result ordinary permissions.
        os.chmod(temporary, _FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
