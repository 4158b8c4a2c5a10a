"""Which inputs a check uses: the one input resolver every command asks, and polygraphy's JSON
input and output files."""
