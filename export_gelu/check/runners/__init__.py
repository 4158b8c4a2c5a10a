"""How a graph or a model is run for a check: polygraphy runners for PyTorch, ONNX Runtime (CPU,
CUDA, TensorRT providers) and TensorRT engines, the deployed artifact, and a run that fails on a
feed."""
