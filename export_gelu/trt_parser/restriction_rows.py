"""The restriction records (see `restrictions.py`): this module assembles `RESTRICTIONS` by
importing the row modules, each registering its rows as it is imported, in the order below.

Each record cites where it was read. Keep one record per (op, condition, version range), in
the module of its op family. Import a row module only from here (its shared helpers are in
`restriction_shared.py`, which registers nothing), so the table's order is this one whichever
module of the package is imported first.
"""

# The order of these imports is the order of `RESTRICTIONS` (and of the hits found).
# isort: off
from export_gelu.trt_parser import restriction_rows_weights  # noqa: F401
from export_gelu.trt_parser import restriction_rows_reduce  # noqa: F401
from export_gelu.trt_parser import restriction_rows_trilu  # noqa: F401
from export_gelu.trt_parser import restriction_rows_einsum  # noqa: F401
from export_gelu.trt_parser import restriction_rows_pad  # noqa: F401
from export_gelu.trt_parser import restriction_rows_limits  # noqa: F401
from export_gelu.trt_parser import restriction_rows_control_flow  # noqa: F401
from export_gelu.trt_parser import restriction_rows_gather  # noqa: F401
from export_gelu.trt_parser import dtype_rows  # noqa: F401
from export_gelu.trt_parser import output_rows  # noqa: F401
from export_gelu.trt_parser import qdq_rows  # noqa: F401
# isort: on
