"""One clear line for the errors a command line run can meet (bad input, unreadable files)."""

from __future__ import annotations

import csv
import re
import zlib

__all__ = ["EXPECTED_ERRORS", "PARAMETER_FLAGS", "explain", "in_flag_words"]

# errors that are the input's or the user's, not a bug: one line and exit code 2 (ImportError:
# an optional package a file format needs, e.g. pyarrow for Parquet)
EXPECTED_ERRORS = (ValueError, TypeError, OSError, EOFError, zlib.error, csv.Error, ImportError)


# The library's parameter names as the command line spells them. The library's messages speak
# to Python users ("pass header=False"); in_flag_words() rewrites a message that reaches a CLI
# user into the flags they can pass ("pass --header no"). Only names with an underscore are
# rewritten where they stand alone (a bare "header" or "metric" is an English word); every name
# is rewritten in "name=value" and in "name must ...".
PARAMETER_FLAGS = {
    # the shared table reader (gpumine.io) and the commands that read features
    "label_column": "--label-column",
    "label_key": "--label-column",  # a .npz file's label array
    "header": "--header",
    "delimiter": "--delimiter",
    "dtype": "--dtype",
    # knn, lof, outliers, stream
    "n_neighbors": "-k",
    "n_outliers": "--top",
    "n_candidates": "--candidates",
    "random_state": "--seed",
    "metric": "--metric",
    "p": "--p",
    "radius": "--radius",
    "contamination": "--contamination",
    "duplicates": "--duplicates",
    "precision": "--precision",
    "working_memory": "--working-memory",
    "device": "--device",
    "backend": "--backend",
    "window_size": "--window",
    "history_size": "--history",
    "threshold": "--threshold",
    "bins_per_dim": "--bins-per-dim",
    "decay": "--decay",
    "virtual_lrd_scale": "--virtual-lrd-scale",
    "max_bins": "--max-bins",
    # counting (nb, tree, itemsets)
    "alpha": "--alpha",
    "handle_unknown": "--handle-unknown",
    "representation": "--representation",
    "min_samples_leaf": "--min-samples-leaf",
    "confidence": "--confidence",
    "max_depth": "--max-depth",
    "categorical_features": "--categorical",
    "min_support": "--min-support",
    "max_len": "--max-len",
    "min_threshold": "--min-threshold",
}
# values spelled otherwise on the command line
_FLAG_VALUES = {"header": {"False": "no", "True": "yes", "infer": "auto", "None": "no"}}
# library advice with no flag behind it, said the way a command line user can follow it
_PHRASES = (
    (re.compile(r",? encode it with categorical_columns=\{[^}]*\}"), ", replace its text by numbers"),
    (re.compile(r" \(e\.g\. sklearn\.impute\.SimpleImputer\)"), ""),
    (re.compile(r"pass encoding= with the file's real encoding \(e\.g\. encoding='latin-1'\)"),
     "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE)"),
    (re.compile(r"pass key= to pick one"), "a command reads the one named 'X'"),
    (re.compile(r"Expected n_neighbors <= n_samples_fit, but n_neighbors = (\d+), n_samples_fit = (\d+)"),
     r"-k \1 needs more rows than the \2 there are"),
    (re.compile(r"delimiter must be None \(detect\), r'\\s\+' \(runs of whitespace\) or one character other "
                r"than a quote or newline"),
     r"--delimiter must be one character other than a quote or newline (or \\s+ for runs of whitespace; leave it "
     r"out to detect)"),
)
_VALUE = r"'[^']*'|\"[^\"]*\"|[\w.+-]*\w"
_ASSIGNED = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, PARAMETER_FLAGS)) + r")\s*=\s*(" + _VALUE + ")?")
_MUST = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, PARAMETER_FLAGS)) + r")(?= must )")
_BARE = re.compile(r"(?<![\w-])(" + "|".join(re.escape(name) for name in PARAMETER_FLAGS if "_" in name)
                   + r")(?![\w=])")


def in_flag_words(message: str) -> str:
    """``message`` with the library's parameter names as the command line's flags (see PARAMETER_FLAGS)."""
    for pattern, replacement in _PHRASES:
        message = pattern.sub(replacement, message)

    def assigned(match):
        name, value = match.group(1), match.group(2)
        flag = PARAMETER_FLAGS[name]
        if value is None:
            return flag
        value = value[1:-1] if value[:1] in "'\"" else value
        return f"{flag} {_FLAG_VALUES.get(name, {}).get(value, value)}"

    message = _ASSIGNED.sub(assigned, message)
    message = _MUST.sub(lambda match: PARAMETER_FLAGS[match.group(1)], message)
    return _BARE.sub(lambda match: PARAMETER_FLAGS[match.group(1)], message)


def explain(exc: BaseException) -> str:
    """The error's one-line reason, in the command line's words, with what to do where the exception alone does not say it."""
    reason = in_flag_words(" ".join(str(exc).split()))
    if isinstance(exc, (EOFError, zlib.error)):
        return f"the input is truncated or corrupt ({reason}); check the file (e.g. gzip -t FILE) or fetch it again"
    if isinstance(exc, csv.Error):
        return (f"the input is not a readable CSV file ({reason}); "
                "pass a text CSV (binary data needs .npy, .npz or .parquet)")
    return reason
