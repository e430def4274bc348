"""``python -m gpumine.stream``: the ``gpumine stream`` command on its own."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m gpumine.stream"))
