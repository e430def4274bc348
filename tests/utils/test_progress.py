import io

from gpumine.utils._progress import Progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_on_a_terminal_only():
    tty = FakeTTY()
    with Progress(total=3, desc="work", verbose=1, stream=tty) as bar:
        for _ in range(3):
            bar.update()
    assert "work [" in tty.getvalue() and "3/3" in tty.getvalue()
    pipe = io.StringIO()
    with Progress(total=3, desc="work", verbose=1, stream=pipe) as bar:
        bar.update(3)
    assert pipe.getvalue() == ""
    quiet = FakeTTY()
    with Progress(total=3, verbose=0, stream=quiet) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""
