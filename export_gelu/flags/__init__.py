"""The flags' base layer: what each flag's value may look like, and how a flag is declared.

Grammars (each parses one flag's text and refuses it with a one-line message naming the flag):
`input_spec` (`--input NAME:SHAPE[:DTYPE[:LOW,HIGH]]`), `dynamic` (`--dynamic` in its three
spellings), `output_names` (`--output-names A,B`), `factory` (`--model-factory pkg.mod:fn`),
`tasks` (`--task`, optimum's task names).

Declarations: `declare` (the `Flag` record: one per flag), `parsers` (argparse parsers built
from them), `keywords` (the Python API's keywords from them), `record` (what every options
record does), `source` (the Python source generated from them).

It imports nothing of the package but `errors`, so the options, the exporter and the checks
can all parse a flag the same way (setup.cfg's import contracts hold it there).
"""
