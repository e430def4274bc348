"""The architecture's layers, checked on every import statement of the package (function-level ones too).

core (algorithm-free primitives and kernels) <- neighbors <- outliers <- stream; counting stands
alone beside them; io (readers, writers) and datasets (loaders, downloads, generators; they read
through io) know no kernels, no algorithm and no Triton, and gpumine.data is only their
compatibility alias; the command line (the gpumine.cli package and each package's ``_cli`` module)
sits on top and no library module imports it. utils (validation, the atomic writer, lazy exports,
progress) sits below every one of them and imports none of them. The benchmark suites
(``benchmarks/`` at the repository root) are not part of the package, and nothing in it imports them.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "gpumine"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path):
    """Absolute names of every module imported by ``path`` (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target
            for alias in node.names:  # `from . import x` may import submodule x
                yield f"{target}.{alias.name}"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_cli(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return _within(module, "gpumine.cli") or module == "gpumine.__main__" or last.endswith("_cli") or \
        module.endswith(".__main__")


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
# every import, third-party ones too (the Triton rule needs them)
ALL_IMPORTS = {name: set(_imports(path)) for name, path in MODULES.items()}
EDGES = {name: {imp for imp in imports if imp.startswith("gpumine")} for name, imports in ALL_IMPORTS.items()}

# the kernels and the algorithms: what the file-handling packages never import
_KERNELS = ["gpumine.core", "gpumine.neighbors", "gpumine.counting", "gpumine.outliers", "gpumine.stream",
            "gpumine.distributed", "triton"]
_CLI = ["gpumine.cli", "gpumine.__main__"]


# (who, must not import, why)
CONTRACTS = [
    ("gpumine.core", ["gpumine.neighbors", "gpumine.outliers", "gpumine.stream", "gpumine.counting", "gpumine.data",
                      "gpumine.io", "gpumine.datasets"], "core holds algorithm-free primitives"),
    ("gpumine.counting", ["gpumine.neighbors", "gpumine.outliers", "gpumine.stream"], "counting does not use kNN"),
    ("gpumine.neighbors", ["gpumine.outliers", "gpumine.stream", "gpumine.counting"],
     "the kNN engine knows no algorithm built on it"),
    ("gpumine.outliers", ["gpumine.stream", "gpumine.counting"], "outliers sit below streams"),
    ("gpumine.io", _KERNELS + _CLI + ["gpumine.datasets", "gpumine.data"],
     "io reads and writes files: no kernel, no algorithm, no Triton, and below the data sets"),
    ("gpumine.datasets", _KERNELS + _CLI + ["gpumine.data"],
     "datasets loads, downloads and makes data (reading through io): no kernel, no algorithm, no Triton"),
    ("gpumine.data", _KERNELS + _CLI, "gpumine.data only re-exports gpumine.io and gpumine.datasets"),
    ("gpumine.utils", ["gpumine.core", "gpumine.data", "gpumine.io", "gpumine.datasets", "gpumine.neighbors",
                       "gpumine.outliers", "gpumine.counting", "gpumine.stream", "gpumine.distributed"] + _CLI,
     "utils is infrastructure below every domain package and the command line"),
]


def _broken(edges, who, forbidden):
    return sorted(f"{module} imports {imp}" for module, imports in edges.items() if _within(module, who)
                  and not _is_cli(module) for imp in imports if any(_within(imp, f) for f in forbidden))


@pytest.mark.parametrize("who,forbidden,why", CONTRACTS, ids=[c[0] for c in CONTRACTS])
def test_layers(who, forbidden, why):
    broken = _broken(ALL_IMPORTS, who, forbidden)
    assert not broken, f"{why}: " + "; ".join(broken)


def test_gpumine_data_is_only_the_alias_of_io_and_datasets():
    data = {name for name in MODULES if _within(name, "gpumine.data")}
    assert data == {"gpumine.data"}, f"new code goes to gpumine.io or gpumine.datasets, not {sorted(data)}"
    elsewhere = sorted(imp for imp in EDGES["gpumine.data"]
                       if not (_within(imp, "gpumine.io") or _within(imp, "gpumine.datasets")))
    assert EDGES["gpumine.data"] and not elsewhere, elsewhere


def test_the_knn_engine_is_entered_through_its_package_only():
    # estimators, outlier detectors and streams use the names gpumine.neighbors.engine exports;
    # its modules are free to change behind them
    engine = "gpumine.neighbors.engine"
    broken = sorted(f"{module} imports {imp}" for module, imports in EDGES.items() if not _within(module, engine)
                    for imp in imports if imp in MODULES and imp.startswith(engine + "."))
    assert not broken, "; ".join(broken)


def test_the_library_never_imports_the_command_line():
    broken = sorted(f"{module} imports {imp}" for module, imports in EDGES.items() if not _is_cli(module)
                    for imp in imports if _is_cli(imp) and imp in MODULES)
    assert not broken, "; ".join(broken)


def _imports_benchmarks(path: Path) -> list[str]:
    """Where ``path`` imports the repository's ``benchmarks`` (an import statement, or its name in a string, as
    ``importlib.import_module("benchmarks.knn")`` would)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:  # a relative import stays inside gpumine
            names.append(node.module or "")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)
    return [name for name in names if _within(name, "benchmarks")]


def test_the_package_never_imports_the_benchmarks():
    assert not (PACKAGE / "bench").exists(), "the benchmark suites live in benchmarks/ at the repository root"
    broken = sorted(f"{module} imports {imp}" for module, path in MODULES.items() for imp in _imports_benchmarks(path))
    assert not broken, "benchmarks/ is not installed with gpumine: " + "; ".join(broken)


def test_the_benchmarks_check_sees_violations(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import importlib\nimportlib.import_module('benchmarks.knn')\n")
    assert _imports_benchmarks(module) == ["benchmarks.knn"]
    module.write_text("from benchmarks import _common\nimport numpy\n")
    assert "benchmarks" in _imports_benchmarks(module)


def test_the_contract_checker_sees_violations():
    # the checker itself can fail: a made-up edge is caught
    assert any(_within(i, "gpumine.core") for i in EDGES["gpumine.neighbors.engine._search"])
    assert _is_cli("gpumine.stream._cli") and not _is_cli("gpumine.stream._streaming")
    # the utils contract has modules to check, and the domain packages do import them
    utils = {"gpumine.utils._validation", "gpumine.utils._atomic", "gpumine.utils._lazy", "gpumine.utils._progress"}
    assert utils <= set(MODULES)
    assert any(_within(i, "gpumine.utils") for i in EDGES["gpumine.neighbors._api"])
    # the command line is a package, and its modules count as command line
    assert _is_cli("gpumine.cli") and _is_cli("gpumine.cli._args") and _is_cli("gpumine.cli._errors")
    assert not _is_cli("gpumine.io._readers") and not _is_cli("gpumine.datasets._datasets")
    # the io and datasets contracts have modules to check, and a made-up kernel, Triton or CLI import is caught
    for package in ("gpumine.io", "gpumine.datasets"):
        forbidden = next(f for who, f, _ in CONTRACTS if who == package)
        modules = [m for m in MODULES if _within(m, package) and m != package]
        assert modules, package
        for made_up in ("gpumine.core.select", "gpumine.neighbors.engine", "triton.language", "gpumine.cli._args"):
            assert _broken({modules[0]: {made_up}}, package, forbidden) == [f"{modules[0]} imports {made_up}"]
    assert _broken({"gpumine.utils._atomic": {"gpumine.io"}}, "gpumine.utils",
                   next(f for who, f, _ in CONTRACTS if who == "gpumine.utils"))
    assert any(_within(i, "gpumine.io") for i in EDGES["gpumine.datasets._datasets"])
