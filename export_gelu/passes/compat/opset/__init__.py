"""Opset conversion: a graph brought down to a target's ceiling (one adapter per op) or up to
where it gains, and constant-only ops a target lacks folded to values."""
