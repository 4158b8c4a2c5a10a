"""Where a failing graph starts to differ: the first module out of tolerance, else the first node,
with ties broken the way ONNX Runtime breaks them."""
