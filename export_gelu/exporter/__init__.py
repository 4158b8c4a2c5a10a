"""Load model files safely, capture them with torch.export, and export to ONNX.

Rooms, each importing only the ones listed after it: `capture/` (torch capture from a loaded
model), `feeds/` (the feeds a run uses and their shapes), `loading/` (a model file or folder
as the module to run), `hf/` (Hugging Face folders and tasks), `onnx_export/` (torch → ONNX),
`model_files/` (what a file is and the safety checks a load obeys), `inputs/` (input specs,
generated inputs, call plans), `saving/` (the ONNX output written whole). `derive_shapes.py`
is the developer tool that regenerates `passes/onnx/exporter_shapes.py`.
"""
