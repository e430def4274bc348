"""Download a file once into a cache folder, verified by SHA-256."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ..utils._atomic import atomic_open
from ._paths import get_data_home

__all__ = ["fetch_file", "sha256_of"]

_CHUNK_BYTES = 1 << 20
_TIMEOUT_S = 60


def sha256_of(path) -> str:
    """Hex SHA-256 digest of a file, read in chunks.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "empty"
    >>> _ = path.write_bytes(b"")
    >>> sha256_of(path)[:16]
    'e3b0c44298fc1c14'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_file(
    url: str,
    *,
    sha256: str | None,
    data_home=None,
    filename: str | None = None,
    expected_size: int | None = None,
) -> Path:
    """Return a local copy of ``url``, downloading it into the cache if needed.

    The download goes to a temporary name in the cache folder, is checked,
    and only then renamed to ``filename``, so an interrupted or corrupted
    download never looks like a good cached file.

    Parameters
    ----------
    url : str
        ``https://``, ``http://`` or ``file://`` address.
    sha256 : str or None
        Expected hex SHA-256 of the file. Required as a keyword so that
        skipping the check (``sha256=None``) is a visible decision; callers
        that skip it should check the content some other way (see
        :func:`gpumine.datasets.load_covtype`).
    data_home : str or path-like, optional
        Cache folder; default ``$GPUMINE_HOME`` or ``~/.cache/gpumine``.
    filename : str, optional
        Name of the cached file; default the last part of the URL's path.
    expected_size : int, optional
        Expected size in bytes, checked as well when given.

    Returns
    -------
    pathlib.Path
        The cached file.

    Raises
    ------
    ValueError
        If the downloaded bytes do not match ``sha256`` or ``expected_size``
        (the message gives both values; the bad download is deleted), or if a
        cached file no longer matches.
    OSError
        If the download fails (no network, unknown host, HTTP error). The
        message says to download the file elsewhere and pass its local path.
    """
    if filename is None:
        filename = Path(urllib.parse.urlparse(url).path).name
    if not filename or filename in (".", ".."):
        raise ValueError(f"cannot derive a file name from url={url!r}; pass filename=.")
    if sha256 is not None:
        sha256 = sha256.strip().lower()
    folder = get_data_home(data_home)
    target = folder / filename
    if target.exists():
        _verify(target, sha256, expected_size, source=f"cached file {target}")
        return target

    # the one atomic writer: a temporary name in the cache folder, renamed to ``target`` only
    # when the body completes, so a failed check (raised inside it) leaves no file behind
    with atomic_open(target, "wb") as out:
        digest, size = hashlib.sha256(), 0
        try:
            with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
                while chunk := response.read(_CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OSError(
                f"could not download {url} ({reason}). If this machine is offline, fetch "
                f"the file on another machine, copy it here, and pass its local path "
                f"(path=...) instead of downloading; or place it at {target}."
            ) from exc
        _check(size, digest.hexdigest, sha256, expected_size, source=f"download of {url}", cached=None)
    return target


def _verify(path: Path, sha256: str | None, expected_size: int | None, *, source: str):
    _check(path.stat().st_size, lambda: sha256_of(path), sha256, expected_size, source=source, cached=path)


def _check(size: int, actual_sha256, sha256: str | None, expected_size: int | None, *, source: str,
           cached: Path | None):
    """Raise ValueError when ``size`` or the digest (``actual_sha256()``, computed only when needed) is not the
    expected one. ``cached`` is the file already in the cache (None for a download, which is discarded)."""
    if expected_size is not None and size != expected_size:
        raise ValueError(
            f"{source}: size {size} bytes, expected {expected_size}. "
            + ("The download was deleted; try again." if cached is None else f"Delete {cached} and retry.")
        )
    if sha256 is None:
        return
    actual = actual_sha256()
    if actual != sha256:
        raise ValueError(
            f"{source}: SHA-256 mismatch: expected {sha256}, got {actual}. "
            + (
                "The download was deleted; the server may have changed the file or it was "
                "corrupted on the way."
                if cached is None
                else f"Delete {cached} and retry."
            )
        )
