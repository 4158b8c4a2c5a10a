"""`examples.hf_folders` is `export_gelu.examples.hf_folders` (see examples/__init__.py)."""

import sys

from export_gelu.examples import hf_folders

sys.modules[__name__] = hf_folders
