"""Precision: a torch program's float32 literals retargeted to fp16/bf16, and fp32 islands kept
in an fp16 ONNX graph where values overflow."""
