"""``python -m gpumine.stream``: the ``gpumine stream`` command on its own."""

from ._cli import exit_after_flush, main

if __name__ == "__main__":
    exit_after_flush(main(prog="python -m gpumine.stream"))
