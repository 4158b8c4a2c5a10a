"""Runners (torch, ONNX Runtime, TensorRT), parity, latency and the report."""
