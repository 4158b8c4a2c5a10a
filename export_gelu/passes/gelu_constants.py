"""The constants of the GELU formulas (docs/gelu.md), shared by every pass level."""

from __future__ import annotations

import math

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
TANH_BETA = 0.044715
QUICK_ALPHA = 1.702

#: Relative tolerance for literals: accepts 0.7978845608, 0.79788456 and √(2/π); rejects
#: 0.7978 (1.1e-4 off), 0.8 and a β of 0.0447.
LITERAL_RTOL = 1e-4
