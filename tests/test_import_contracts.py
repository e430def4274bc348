"""The architecture's layers, checked on every import statement of the package (function-level ones too).

core (algorithm-free primitives and kernels) <- neighbors <- outliers <- stream; counting stands
alone beside them; data (readers, writers, datasets) knows no kernels and no algorithm; the command
line modules sit on top and no library module imports them. utils (validation, the atomic writer,
lazy exports, progress) sits below every one of them and imports none of them. The benchmark suites (``benchmarks/``
at the repository root) are not part of the package, and nothing in it imports them.
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


def _is_cli(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return module in ("gpumine.cli", "gpumine.__main__") or last in ("_cli", "_cli_args", "_cli_errors") or \
        last.endswith("_cli") or module.endswith(".__main__")


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
EDGES = {name: {imp for imp in _imports(path) if imp.startswith("gpumine")} for name, path in MODULES.items()}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# (who, must not import, why)
CONTRACTS = [
    ("gpumine.core", ["gpumine.neighbors", "gpumine.outliers", "gpumine.stream", "gpumine.counting", "gpumine.data"],
     "core holds algorithm-free primitives"),
    ("gpumine.counting", ["gpumine.neighbors", "gpumine.outliers", "gpumine.stream"], "counting does not use kNN"),
    ("gpumine.neighbors", ["gpumine.outliers", "gpumine.stream", "gpumine.counting"],
     "the kNN engine knows no algorithm built on it"),
    ("gpumine.outliers", ["gpumine.stream", "gpumine.counting"], "outliers sit below streams"),
    ("gpumine.data", ["gpumine.counting", "gpumine.neighbors", "gpumine.outliers",
                      "gpumine.stream"], "io knows no kernels and no algorithm"),
    ("gpumine.utils", ["gpumine.core", "gpumine.data", "gpumine.neighbors", "gpumine.outliers", "gpumine.counting",
                       "gpumine.stream", "gpumine.distributed", "gpumine.cli", "gpumine.__main__", "gpumine._cli_args",
                       "gpumine._cli_errors"], "utils is infrastructure below every domain package and the command line"),
]


@pytest.mark.parametrize("who,forbidden,why", CONTRACTS, ids=[c[0] for c in CONTRACTS])
def test_layers(who, forbidden, why):
    broken = sorted(f"{module} imports {imp}" for module, imports in EDGES.items() if _within(module, who)
                    and not _is_cli(module) for imp in imports if any(_within(imp, f) for f in forbidden))
    assert not broken, f"{why}: " + "; ".join(broken)


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
