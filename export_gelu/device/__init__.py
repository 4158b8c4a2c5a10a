"""The device bundle: what a TensorRT box export-gelu cannot drive runs, and reading back
what it produced."""
