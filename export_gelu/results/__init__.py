"""What the steps of a command take and return, and what a command ends with: frozen, typed
records (the one exception, `export.HeldModels`, says why it is not).

A step is a function whose parameters are what it needs and whose return value is what it
made (export_gelu/steps/); a command is a function calling steps (export_gelu/flows/); its
result is what `report.build.build_report` turns into the report, once. These records are
what passes between them, so the type checker checks the data flow:

- request.py: `Request` (the options, checked) and `Source`, what was loaded: one of four
  kinds (`ModuleSource`, `ProgramSource`, `OnnxSource`, `GraphsSource`);
- export.py: an export's plan, inputs, graph, engine, verdict and result;
- verify.py, device.py, forms.py: the other commands' records and results.
"""
