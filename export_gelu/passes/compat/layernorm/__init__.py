"""LayerNormalization: expanded to primitives, fused back, its scale and bias typed like its
input."""
