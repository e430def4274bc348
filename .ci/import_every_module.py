"""Import every module of the installed gpumine package; exit 1 naming each one that fails.

Run after installing gpumine with its core dependencies only: no module may need
an optional extra (Triton, pyarrow, Dask, matplotlib, ...) at import time.
``--block NAME ...`` makes those packages unimportable first, so the same check
runs on a machine that has them.
"""

import argparse
import importlib
import pkgutil
import sys
import traceback


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--block", nargs="*", default=[], help="packages to make unimportable first")
    args = parser.parse_args(argv)
    for name in args.block:
        sys.modules[name] = None  # import then raises ImportError, as for a missing package
    import gpumine

    # __main__ modules run the command line when imported
    names = ["gpumine"] + [m.name for m in pkgutil.walk_packages(gpumine.__path__, "gpumine.") if not m.name.endswith(".__main__")]
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
            print(f"FAILED to import {name}:\n{traceback.format_exc()}", file=sys.stderr)
    leaked = [b for b in args.block if sys.modules.get(b) is not None]
    if leaked:
        print(f"blocked packages were imported anyway: {leaked}", file=sys.stderr)
    print(f"imported {len(names) - len(failed)} of {len(names)} modules")
    return 1 if failed or leaked else 0


if __name__ == "__main__":
    sys.exit(main())
