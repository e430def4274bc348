"""Callables of the sphinx-gallery configuration in ``docs/conf.py``.

Sphinx caches its configuration with pickle, and a function defined in ``conf.py``
cannot be pickled (Sphinx warns, and the build runs with warnings as errors), so
``sphinx_gallery_conf`` names these by their qualified names instead.

``reset_argv``
    The command line each example runs with in the build: ``--device cpu``, or the
    device in ``GPUMINE_DOCS_DEVICE`` (``auto``, ``cuda`` ...), so the pages show the
    same output on every machine unless asked otherwise.
``ExampleOrder``
    The gallery's order: the order of the user guide (neighbours, outliers,
    streams, counting), then any other example by file name.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ORDER", "ExampleOrder", "reset_argv"]

#: the examples in the order of the user guide's pages
ORDER = ("knn_covtype.py", "outliers_covtype.py", "streaming_lof.py", "nb_c45_covtype.py", "itemsets_covtype.py")


def reset_argv(gallery_conf, script_vars):
    """``sys.argv[1:]`` of every example in the documentation build."""
    return ["--device", os.environ.get("GPUMINE_DOCS_DEVICE", "cpu")]


class ExampleOrder:
    """Sort key of the examples within the gallery (sphinx-gallery's ``within_subsection_order``)."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __repr__(self):
        return f"{type(self).__name__}()"

    def __call__(self, filename):
        name = Path(filename).name
        return (ORDER.index(name), "") if name in ORDER else (len(ORDER), name)
