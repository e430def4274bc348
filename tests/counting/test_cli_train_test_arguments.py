"""nb and tree take TRAIN [TEST] as knn, lof and outliers take their files; --train/--test stay for one release."""

import pytest

from gpumine.cli import main
from tests.counting.test_cli import WEATHER


@pytest.fixture
def weather(tmp_path):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER)
    return path


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_positional_files_and_the_old_flags_give_the_same_output(command, weather, capsys):
    assert main([command, str(weather), str(weather), "--label-column", "play", "--device", "cpu", "--quiet"]) == 0
    positional = capsys.readouterr()
    assert positional.err == ""
    assert main([command, "--train", str(weather), "--test", str(weather), "--label-column", "play", "--device", "cpu",
                 "--quiet"]) == 0
    old = capsys.readouterr()
    def results(out):  # the same model and accuracy; the timing line differs
        return [line for line in out.splitlines() if " s on " not in line]

    assert results(old.out) == results(positional.out) and results(old.out)
    assert "--train is deprecated" in old.err and "use TRAIN as the first argument" in old.err
    assert "--test is deprecated" in old.err


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_a_missing_training_file_is_one_clear_line(command, capsys):
    assert main([command, "--label-column", "play", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the training file is required" in err and "TRAIN [TEST]" in err
