"""Library code says why, not when or where: no dates, GPU models, sessions, issue numbers, private data or timings.

History (which device, which day, which session measured what) lives in BENCHMARKS.md ("Design measurements
quoted in the code") and in commit messages. Every line of ``src/gpumine/**/*.py`` (comments, docstrings,
messages) is scanned; the allow-list names the few lines where a pattern means something else.
"""

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "gpumine"

PATTERNS = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b|\b202[4-9]\b"),  # the project's years; citations are older
    "a GPU model": re.compile(r"\b(H100|H200|A100|V100)\b"),
    "a work session": re.compile(r"\bsessions?\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissue\s*#?\d+", re.IGNORECASE),
    "a private data folder": re.compile(r"\.devdata\b"),
    "a seed's name": re.compile(r"\bseed\s+0\d", re.IGNORECASE),
    "a timing": re.compile(r"\d(\.\d+)?\s?(ms|µs|us|ns)\b|\d(\.\d+)? s\b|\d\s?(seconds|milliseconds|microseconds)\b"),
}

# (file under src/gpumine, text of the line): where a pattern is not history
ALLOWED = {
    ("neighbors/engine/_host_gemm.py", "g (3 |x|^2 + 2 s)"),  # "2 s": twice the score s, in an error bound
}


def _findings(text: str, name: str, allowed=ALLOWED) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if any(name == file and snippet in line for file, snippet in allowed):
            continue
        for what, pattern in PATTERNS.items():
            match = pattern.search(line)
            if match:
                found.append(f"{name}:{number}: {what} ({match.group(0)!r}): {line.strip()}")
    return found


def test_library_code_carries_no_history():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += _findings(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix())
    assert not found, ("say why in the code and move the measurement, device and date to BENCHMARKS.md "
                       "(\"Design measurements quoted in the code\"):\n" + "\n".join(found))


def test_every_allowed_line_still_exists():
    # an allow-list entry whose line is gone would quietly exempt a future line
    for file, snippet in ALLOWED:
        assert snippet in (PACKAGE / file).read_text(encoding="utf-8"), (file, snippet)


@pytest.mark.parametrize("line,what", [
    ("# measured 2026-11-21 on the cluster", "a date"),
    ("# (fourth session) the kernel won", "a work session"),
    ("# on an H200 this ran faster", "a GPU model"),
    ('"""See issue 4 for the seed."""', "an issue number"),
    ("# script .devdata/s10_lanes.py", "a private data folder"),
    ("# as seed 000 did", "a seed's name"),
    ("# 0.4 vs 41 ms on a CI machine", "a timing"),
    ("# ~10 us each", "a timing"),
    ("# took 1.37 s at 1M rows", "a timing"),
])
def test_the_scan_sees_history(line, what):
    (finding,) = _findings(line, "m.py")
    assert f": {what} (" in finding


@pytest.mark.parametrize("line", [
    "# LOF_GPU (Yu 2017, section 3.1)", "window_size : int, default=2048", "# k = 2048 candidates",
    "# 32,768 x 65 features", "# several times faster", "print(f'{seconds:.1f} s')",
])
def test_the_scan_leaves_ordinary_text(line):
    assert not _findings(line, "m.py")


def test_an_allowed_line_is_exempt_in_its_file_only():
    line = "# bound 2 s)"
    assert not _findings(line, "m.py", allowed={("m.py", "bound 2 s)")})
    assert _findings(line, "other.py", allowed={("m.py", "bound 2 s)")})
