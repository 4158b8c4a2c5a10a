"""The `--gelu` forms a graph's GELUs can be rewritten into, and the one check of a name."""

from __future__ import annotations

from export_gelu.errors import BadInputError

#: `--gelu` values export() takes (`auto` is the CLI's: it compares first, then exports one).
GELU_FORMS = ("keep", "erf", "tanh", "sigmoid", "plugin")


def check_form_name(form: str) -> None:
    """A form that is not one is bad input (exit 2), wherever it comes in."""
    if form not in GELU_FORMS:
        raise BadInputError(f"--gelu {form!r}: choose one of {', '.join(GELU_FORMS)}")
