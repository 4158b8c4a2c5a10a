"""The feeds a run uses and their shapes: the input arrays from flags, a `.npz`, the model's own
examples or generated (feeds), `--dynamic` dims resolved to input axes and ranges (dynamic;
one axis's profile range: dynamic_axes), the dims a Hugging Face graph declares (hf_dims)."""
