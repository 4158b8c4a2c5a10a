"""Checks of a deployed graph: runners (torch, ONNX Runtime, TensorRT, recorded outputs),
feeds, tolerances, parity and latency."""
