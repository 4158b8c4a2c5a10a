"""Load model files safely, capture them with torch.export, and export to ONNX."""
