"""The README's data and design paragraphs: which loaders download, where data is found, public names only."""

import re
from pathlib import Path

from gpumine import datasets

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_the_readme_names_every_downloader_and_where_data_is_looked_for():
    for name in [n for n in datasets.__all__ if n.startswith("fetch_")]:
        assert f"`{name}`" in README, name
    for variable in ("GPUMINE_DATA_DIR", "GPUMINE_HOME"):
        assert f"${variable}" in README, variable
    # no sentence says every loader downloads
    assert "a download to `~/.cache/gpumine`" not in README


def test_the_readme_points_at_public_modules_only():
    private = sorted(set(re.findall(r"`(?:gpumine\.[\w.]*\._\w+|_[a-z]\w*)`", README)))
    assert not private, f"the README names private modules: {private}"
