"""TensorRT restriction fixes: rewrites that take a graph out of a parser restriction or past an
op the parser lacks, without changing its math (`apply.py` runs the ones registered in
`registry.py`)."""
