"""The documentation in docs/: its examples run, its API reference and CLI reference are complete.

* Every script in ``docs/examples`` runs on the CPU, exits 0 and draws at least one
  matplotlib figure. The fast tier runs them all in one subprocess (one interpreter
  start and one import of torch and scikit-learn for all of them); the ``slow`` tier
  runs each as its own script and has it write its figures.
* ``docs/examples`` is a sphinx-gallery gallery: a header page, and each script a
  title block and ``# %%`` cells; each is linked from a page of the user guide.
* Every public name (the ``__all__`` of each documented package) has an entry in the
  API reference (``docs/api/*.rst``), and every ``gpumine`` sub-command a
  ``gpumine-cli`` directive in ``docs/cli.rst``, so neither reference can go stale.
* The Sphinx build itself with warnings as errors, in the CI tier (the test extra
  installs Sphinx and sphinx-gallery; skipped without them): it runs every example
  (unless unchanged since the last build of this checkout: sphinx-gallery keeps their
  results in ``docs/auto_examples``), and the site must hold a page with a figure for
  each. ``slow``: the doctest blocks of the guides.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))
HAVE_SPHINX = all(importlib.util.find_spec(name) is not None for name in ("sphinx", "sphinx_gallery", "matplotlib"))
# the packages whose __all__ the API reference documents, and the page of each
API_PAGES = {
    "gpumine": "gpumine.rst",
    "gpumine.config": "config.rst",
    "gpumine.neighbors": "neighbors.rst",
    "gpumine.outliers": "outliers.rst",
    "gpumine.stream": "stream.rst",
    "gpumine.counting": "counting.rst",
    "gpumine.distributed": "distributed.rst",
    "gpumine.io": "io.rst",
    "gpumine.datasets": "datasets.rst",
}

# runs each example as __main__ with --device cpu; one JSON line per example on stdout, with the
# number of matplotlib figures it left open (then closed, so the next example starts with none)
_DRIVER = r"""
import contextlib, io, json, runpy, sys, time, traceback
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
for path in sys.argv[1:]:
    sys.argv = [path, "--device", "cpu"]
    out, code, error = io.StringIO(), 0, None
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code, error = 1, traceback.format_exc()
    figures = len(plt.get_fignums())
    plt.close("all")
    print(json.dumps({"path": path, "code": code, "seconds": time.perf_counter() - start, "figures": figures,
                      "stdout": out.getvalue(), "error": error}), flush=True)
"""


def test_there_are_three_to_five_examples():
    assert 3 <= len(EXAMPLES) <= 5, [p.name for p in EXAMPLES]


@pytest.fixture(scope="module")
def example_runs():
    """Every example run once, in one interpreter: {file name: record}."""
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *map(str, EXAMPLES)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    runs = {}
    for line in proc.stdout.splitlines():
        if line.startswith('{"path"'):
            record = json.loads(line)
            runs[Path(record["path"]).name] = record
    assert runs or proc.returncode == 0, proc.stderr[-3000:]
    return runs


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_on_the_cpu(example, example_runs):
    record = example_runs.get(example.name)
    assert record is not None, f"{example.name} did not run (the driver stopped before it)"
    assert record["code"] == 0, f"{example.name} exited {record['code']}:\n{record['stdout']}\n{record['error'] or ''}"
    assert record["stdout"].strip(), f"{example.name} printed nothing"
    assert record["figures"] >= 1, f"{example.name} drew no matplotlib figure"


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_as_a_script(example, tmp_path):
    proc = subprocess.run([sys.executable, str(example), "--device", "cpu", "--figures", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(tmp_path.glob(f"{example.stem}_*.png")), f"{example.name} --figures wrote no PNG file"


# -- the gallery's sources -----------------------------------------------------------------
def test_the_gallery_has_a_header():
    headers = [p for p in (DOCS / "examples").glob("*.rst") if p.stem in ("GALLERY_HEADER", "README")]
    assert headers, "docs/examples needs a GALLERY_HEADER.rst (the gallery's index page)"
    assert re.search(r"^\.\. _examples:$", headers[0].read_text(), re.M), "the guides link to the label 'examples'"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_in_the_gallery_format(example):
    """A docstring whose first lines are a title underlined with '=', then code cells ('# %%')."""
    text = example.read_text()
    title = re.match(r'"""\n(\S.*)\n(=+)\n', text)
    assert title and len(title.group(2)) >= len(title.group(1)), \
        f"{example.name}: the docstring must open with a title underlined by '=' (sphinx-gallery's title block)"
    assert re.search(r"^# %%", text, re.M), f"{example.name}: no '# %%' cell"
    assert re.search(r"^\s*matplotlib\.use\(\"Agg\"\)", text, re.M), f"{example.name}: as a script, draw with Agg"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_linked_from_the_guide(example):
    rst = "\n".join(p.read_text() for p in (DOCS / "guide").glob("*.rst"))
    assert f"sphx_glr_auto_examples_{example.stem}.py" in rst, \
        f"no page of the user guide links to the gallery page of docs/examples/{example.name}"


# -- the API reference ---------------------------------------------------------------------
def documented_names(page: Path) -> dict[str, set[str]]:
    """{module: names} listed on ``page`` in autosummary tables or ``auto*`` directives.

    The module of an entry is the last ``currentmodule`` (or ``module``) before it.
    """
    found: dict[str, set[str]] = {}
    module = None
    in_table = False
    for line in page.read_text().splitlines():
        directive = re.match(r"\.\. (current)?module:: (\S+)", line.strip())
        if directive:
            module = directive.group(2)
            in_table = False
            continue
        auto = re.match(r"\s*\.\. auto(?:function|class|data|exception|attribute|method)::\s+(\S+)", line)
        if auto:
            found.setdefault(module, set()).add(auto.group(1).lstrip("~"))
            continue
        if re.match(r"\s*\.\. autosummary::", line):
            in_table = True
            continue
        if in_table:
            stripped = line.strip()
            if not stripped or stripped.startswith(":"):
                continue  # options and the blank line before the entries
            if not line.startswith("   "):
                in_table = False  # the table ended at the first unindented line
                continue
            found.setdefault(module, set()).add(stripped.lstrip("~"))
    return found


@pytest.mark.parametrize("module_name", sorted(API_PAGES))
def test_every_public_name_is_in_the_api_reference(module_name):
    page = DOCS / "api" / API_PAGES[module_name]
    documented = documented_names(page).get(module_name, set())
    public = set(importlib.import_module(module_name).__all__)
    missing = sorted(public - documented)
    assert not missing, f"{page.relative_to(ROOT)} lacks {missing}: add them to an autosummary table"
    stale = sorted(documented - public)
    assert not stale, f"{page.relative_to(ROOT)} lists {stale}, which {module_name}.__all__ does not export"


def test_api_index_lists_every_page():
    index = (DOCS / "api" / "index.rst").read_text()
    for page in API_PAGES.values():
        assert re.search(rf"^\s+{re.escape(Path(page).stem)}\s*$", index, re.M), page


# -- the CLI reference ---------------------------------------------------------------------
def test_every_command_has_an_entry_in_the_cli_reference():
    """docs/cli.rst generates a section per sub-command; each needs its introduction there."""
    from gpumine.cli import build_parser

    commands = next(a.choices for a in build_parser()._actions if a.dest == "command")
    text = (DOCS / "cli.rst").read_text()
    block = re.search(r"^\.\. gpumine-cli-commands::\n\n((?:   .*\n|\n)*)", text, re.M)
    assert block, "docs/cli.rst lacks its '.. gpumine-cli-commands::' directive"
    entries = set(re.findall(r"^   ([a-z][\w-]*):\s", block.group(1), re.M))
    missing = sorted(set(commands) - entries)
    assert not missing, f"docs/cli.rst: add an introduction for {missing} to '.. gpumine-cli-commands::'"


# -- the build itself (needs Sphinx and sphinx-gallery: pip install -e '.[docs]') ----------
def _sphinx(builder: str, out: Path, *options: str):
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", *options, "-b", builder,
                           str(DOCS), str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)


# in the CI tier (the test extra installs Sphinx): the site is built with warnings as errors on every run
@pytest.mark.skipif(not HAVE_SPHINX, reason="Sphinx, sphinx-gallery or matplotlib missing (pip install -e '.[docs]')")
def test_docs_build_without_warnings(tmp_path):
    html = tmp_path / "html"
    proc = _sphinx("html", html)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert (html / "index.html").exists()
    assert (html / "auto_examples" / "index.html").exists(), "the build made no gallery"
    for example in EXAMPLES:  # a page per example, showing the first figure the example drew
        page = html / "auto_examples" / f"{example.stem}.html"
        assert page.exists(), f"the gallery has no page for {example.name}"
        figure = f"sphx_glr_{example.stem}_001.png"
        image = html / "_images" / figure
        assert image.exists() and image.stat().st_size > 0, f"the gallery has no figure of {example.name}"
        assert figure in page.read_text(), f"the gallery page of {example.name} shows no figure"


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SPHINX, reason="Sphinx, sphinx-gallery or matplotlib missing (pip install -e '.[docs]')")
def test_guide_doctests_pass(tmp_path):
    # the gallery's pages without running the examples (the html build runs them)
    proc = _sphinx("doctest", tmp_path / "doctest", "-D", "plot_gallery=0")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
