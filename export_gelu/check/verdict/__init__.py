"""The verdict: parity against the reference with one pair of tolerances, a reference that is not
deterministic, PyTorch's own error at a reduced precision, and whether that precision is usable."""
