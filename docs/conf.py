"""Sphinx configuration of the gpumine documentation.

Build with ``make docs`` (or ``python -m sphinx -W -b html docs docs/_build/html``);
it needs the ``docs`` extra (``pip install -e '.[docs]'``). The API reference is
generated from the docstrings by autosummary (stub pages in ``docs/api/generated``,
not kept in git) and the command-line reference from the argparse parsers by the
``gpumine-cli`` directive of ``docs/_ext/gpumine_cli.py``.

The gallery (``docs/auto_examples``, generated, not kept in git) is built by
sphinx-gallery from the scripts in ``docs/examples``: every script runs during the
build (on the CPU; ``GPUMINE_DOCS_DEVICE=cuda`` runs them on a GPU), its output and
figures go into its page, and an error in one stops the build.

Intersphinx links to NumPy, scikit-learn, PyTorch, pandas and Python need the
network; they are off by default (the build then works offline) and on with
``GPUMINE_DOCS_INTERSPHINX=1``.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the source tree first, so the docs describe this checkout even where another gpumine is installed
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE / "_ext"))

import gpumine  # noqa: E402

project = "gpumine"
author = "the gpumine authors"
copyright = "gpumine authors, BSD-3-Clause"  # noqa: A001 - Sphinx's name
version = release = gpumine.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "gpumine_cli",
]

templates_path = ["_templates"]
# examples/ holds the gallery's sources; sphinx-gallery writes their pages into auto_examples/
exclude_patterns = ["_build", "examples"]
root_doc = "index"
smartquotes = False  # "--label-column" in generated text stays two hyphens, quotes stay straight
default_role = "literal"  # `x` in the guides is code, never a broken cross-reference

# -- autodoc / autosummary / napoleon ------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc "Parameters" sections say it (and the signatures show defaults)
autodoc_preserve_defaults = True
autoclass_content = "class"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True

# docstrings mention many private helpers (``gpumine.neighbors.engine._search`` ...) by role; they are
# not part of the reference, so unresolved references stay plain text instead of warnings
nitpicky = False

# -- doctest: only the ``.. doctest::`` blocks of the guides (docstrings run under pytest) ----
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import numpy as np
"""

# -- the example gallery (sphinx-gallery) ---------------------------------------------------
# Callables are named by their qualified names (docs/_ext/gpumine_gallery.py): Sphinx pickles
# its configuration, and functions defined here would not pickle.
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"\.py$",  # every example runs during the build, not only plot_*.py
    "within_subsection_order": "gpumine_gallery.ExampleOrder",  # the user guide's order
    "reset_argv": "gpumine_gallery.reset_argv",  # each example's command line: --device cpu
    "abort_on_example_error": True,  # a failed example (or a failed check in one) stops the build
    "only_warn_on_example_error": False,
    "plot_gallery": "True",
    "image_scrapers": ("matplotlib",),
    "doc_module": ("gpumine",),  # names of gpumine in the examples' code link to the API reference
    "backreferences_dir": "auto_examples/backreferences",  # what the guides' minigallery directives read
    "remove_config_comments": True,
    "write_computation_times": False,  # no sg_execution_times.rst pages in the source tree
    "download_all_examples": False,  # each page has its own .py and .ipynb downloads
    "show_memory": False,  # no Binder or JupyterLite links either (their defaults): the build needs no network
}

# -- intersphinx (network; opt-in) ---------------------------------------------------------
intersphinx_mapping = {}
if os.environ.get("GPUMINE_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "sklearn": ("https://scikit-learn.org/stable", None),
        "torch": ("https://pytorch.org/docs/stable", None),
        "pandas": ("https://pandas.pydata.org/docs", None),
    }

# -- HTML ----------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"gpumine {release}"
html_static_path = []
# BENCHMARKS.md beside the pages, so the benchmarks page can link to the numbers themselves
html_extra_path = [str(ROOT / "BENCHMARKS.md")]
html_theme_options = {"description": "Exact data mining on the GPU, with the same results on the CPU"}


# -- docstring fix-ups at build time (the sources stay as they are) ------------------------
_TRAILING_UNDERSCORE = re.compile(r"(?<![`\w\\])([A-Za-z]\w*_)(?![\w`])")


def _literal_fitted_names(app, what, name, obj, options, lines):
    """Quote fitted-attribute names (``n_features_in_``) in the type fields napoleon wrote.

    In reStructuredText a bare ``word_`` is a hyperlink reference; numpydoc types such as
    ``ndarray of shape (n_features_in_,)`` would otherwise be broken links.
    """
    for i, line in enumerate(lines):
        match = re.match(r"(\s*:(?:vartype|type|rtype)[^:]*:)(.*)", line)
        if match:
            lines[i] = match.group(1) + _TRAILING_UNDERSCORE.sub(r"``\1``", match.group(2))


def _no_type_docstrings(app, what, name, obj, options, lines):
    """Module constants (``KDD_FLAGS``, ``__version__``) have no docstring of their own: show none.

    autodoc would otherwise print the docstring of their type (``tuple``, ``str``).
    """
    if what in ("data", "attribute") and lines and inspect.getdoc(type(obj)) == inspect.getdoc(obj):
        lines[:] = []


def _skip_scikit_learn_members(app, what, name, obj, skip, options):
    """Leave out what gpumine's estimators inherit from scikit-learn (get_params, set_output, ...).

    Their docstrings point into scikit-learn's own documentation; the user guide says
    the estimators are scikit-learn estimators.
    """
    if (getattr(obj, "__module__", None) or "").startswith("sklearn"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _literal_fitted_names, priority=600)  # after napoleon (500)
    app.connect("autodoc-process-docstring", _no_type_docstrings)
    app.connect("autodoc-skip-member", _skip_scikit_learn_members)
