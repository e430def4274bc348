"""``python -m gpumine.stream``: the ``gpumine stream`` command on its own."""

import os
import sys

from ._cli import main

if __name__ == "__main__":
    code = main(prog="python -m gpumine.stream")
    # The output and the state file are complete here: leave without the interpreter's teardown,
    # which takes about a second once torch (and a CUDA context) are loaded.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader of the output has gone: nothing left to deliver
            pass
    os._exit(code)
