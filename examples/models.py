"""`examples.models` is `export_gelu.examples.models` (see examples/__init__.py)."""

import sys

from export_gelu.examples import models

sys.modules[__name__] = models
