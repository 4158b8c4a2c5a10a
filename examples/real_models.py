"""`examples.real_models` is `export_gelu.examples.real_models` (see examples/__init__.py)."""

import sys

from export_gelu.examples import real_models

sys.modules[__name__] = real_models
