"""gpumine.stream exports its names through the shared lazy helper (gpumine.utils._lazy): nothing loads on import."""

import importlib
import subprocess
import sys

import pytest

import gpumine.stream as stream
from gpumine.utils import _lazy

NAMES = {
    "StreamingLOF": "_streaming", "SlidingWindowLOF": "_streaming", "load_detector": "_streaming",
    "BinnedSummary": "_binning", "iter_records": "_sources", "RecordBatch": "_sources",
    "make_drifting_stream": "_synthetic", "parse_threshold": "_threshold",
}


def test_the_shared_helper_serves_the_names():
    assert stream.__getattr__.__module__ == _lazy.__name__
    assert sorted(stream.__all__) == sorted(NAMES)
    assert set(NAMES) <= set(dir(stream))


@pytest.mark.parametrize("name,module", sorted(NAMES.items()))
def test_each_name_is_its_module_object(name, module):
    assert getattr(stream, name) is getattr(importlib.import_module(f"gpumine.stream.{module}"), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        stream.nothing  # noqa: B018
    assert not hasattr(stream, "nothing")


def test_importing_the_package_loads_no_detector_module():
    code = ("import sys, gpumine.stream\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('gpumine.stream.') or m in ('torch', 'sklearn'))\n"
            "print(loaded)\n"
            "from gpumine.stream import parse_threshold\n"
            "print('gpumine.stream._threshold' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"
