"""Saving: an ONNX model written whole or not at all (save), the working folder a big model's
weights pass through (workdir), and whether the output's disk can hold them (weight_size)."""
