"""Reading and writing files: one reader per format, writers that never leave a partial file.

Readers return NumPy arrays (never tensors: turning data into tensors on a
device is the estimators' job). Delimited text goes through pandas' C parser,
Parquet through pyarrow; a cell or row that cannot be read is reported by the
line and column a text editor shows. Writers replace their target atomically.
"""

from ..utils._atomic import atomic_open
from ._readers import read_csv, read_npy, read_npz, read_parquet, read_table
from ._writers import check_output_path, write_array, write_result

__all__ = [
    "read_table",
    "read_csv",
    "read_parquet",
    "read_npy",
    "read_npz",
    "write_result",
    "write_array",
    "atomic_open",
    "check_output_path",
]
