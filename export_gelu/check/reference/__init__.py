"""The reference a check compares against: the runner (PyTorch, or an ONNX input in ONNX Runtime),
and a reference run recorded once and replayed."""
