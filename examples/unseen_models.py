"""`examples.unseen_models` is `export_gelu.examples.unseen_models` (see examples/__init__.py)."""

import sys

from export_gelu.examples import unseen_models

sys.modules[__name__] = unseen_models
