"""Torch programs made exportable by the TorchScript exporter: attention lowered below opset
14, writes into views made explicit."""
