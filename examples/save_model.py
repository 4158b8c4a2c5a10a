"""`examples.save_model` is `export_gelu.examples.save_model` (see examples/__init__.py);
`python -m examples.save_model …` runs it from a clone."""

import sys

from export_gelu.examples import save_model

if __name__ == "__main__":
    sys.exit(save_model.main())
sys.modules[__name__] = save_model
