"""torch → ONNX: the exporter that reaches the target's opset (to_onnx), every node's module
recorded (scopes), and the model's own output names given (output_names, model_names)."""
