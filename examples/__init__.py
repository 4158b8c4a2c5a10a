"""The bundled examples live in `export_gelu/examples/` and ship with the package
(`python -m export_gelu.examples.save_model …` after `pip install 'export-gelu[examples]'`).
This folder keeps `examples.<module>` working in a clone: each module here is the packaged
one under a second name (the same module object, not a copy)."""
