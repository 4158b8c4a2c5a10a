"""GELU passes: find every GELU, canonicalize it, lower it to what the target wants."""
