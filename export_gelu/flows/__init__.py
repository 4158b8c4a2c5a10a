"""The commands as plain functions over typed results: inspect, export (one graph or several),
verify, verify --device-outputs, --compare-forms and --gelu auto. Each reads top to bottom:
the steps it calls (export_gelu/steps/), in order, with `if`s and loops."""
