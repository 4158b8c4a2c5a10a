"""torch capture: a loaded model as a torch.export ExportedProgram at the run's precision
(capture), with the `--dynamic` dims (dynamic_capture), a float64 model cast down on request
(cast_down), the deployment engineer's fallbacks when an exporter fails (fallback), and an
independent copy of a program for passes that rewrite it (program_copy)."""
