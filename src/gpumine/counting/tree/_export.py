"""Export of a fitted tree: the text layout of Weka's J48."""

from __future__ import annotations

import math

import numpy as np

from ._estimates import _SMALL


def _jnum(x):
    """A weight as J48 prints it: Weka's ``Utils.roundDouble(x, 2)`` (half up) in Java's ``Double.toString``.

    Examples
    --------
    >>> _jnum(5.0), _jnum(2.004), _jnum(1e8)
    ('5.0', '2.0', '1.0E8')
    """
    r = math.floor(float(x) * 100 + 0.5) / 100
    if r == 0 or 1e-3 <= abs(r) < 1e7:
        return repr(r)
    m, e = f"{r:.15e}".split("e")
    m = m.rstrip("0")
    return f"{m}0E{int(e)}" if m.endswith(".") else f"{m}E{int(e)}"


def export_text(tables, classes, names, values, decimals=6):
    """The tree of prediction ``tables`` (host arrays) in Weka J48's text layout: ``attr = value: class
    (weight/errors)``, a numeric test as ``attr <= cut`` / ``attr > cut``, each level indented by ``|   ``.

    ``classes``: the class labels; ``names``: the feature names; ``values``: each nominal feature's
    categories (``_Columns.values``); ``decimals``: significant digits of numbers.
    """
    lines = []

    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.{decimals}g}"
        return str(v)

    def leaf_text(i):
        dist = tables["dist"][i]
        cls = classes[int(np.argmax(tables["prob"][i]))]
        tot = dist.sum()
        err = tot - dist.max() if tot > 0 else 0.0
        return f"{cls} ({_jnum(tot)}/{_jnum(err)})" if err > _SMALL else f"{cls} ({_jnum(tot)})"

    def walk(i, indent):
        j = int(tables["attr"][i])
        kids = [k for k in tables["kids"][i] if k >= 0]
        for b, k in enumerate(kids):
            if tables["num"][i]:
                thr = tables["thr"][i]
                cond = f"{names[j]} {'<=' if b == 0 else '>'} {fmt(thr)}"
            else:
                cond = f"{names[j]} = {fmt(values[j][b])}"
            prefix = "|   " * indent
            if tables["attr"][k] < 0:
                lines.append(f"{prefix}{cond}: {leaf_text(k)}")
            else:
                lines.append(f"{prefix}{cond}")
                walk(k, indent + 1)

    if tables["attr"][0] < 0:
        return f": {leaf_text(0)}"
    walk(0, 0)
    return "\n".join(lines)
