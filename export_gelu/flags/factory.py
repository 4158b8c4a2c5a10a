"""`--model-factory PKG.MODULE:FUNC`: the form of a factory's name (importing it is the
loader's, exporter/loading/load.py)."""

from __future__ import annotations

import re

from export_gelu.errors import BadInputError

_FACTORY_FORM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def factory_parts(spec: str) -> tuple[str, str]:
    """`--model-factory PKG.MODULE:FUNC` → (module, attribute); exit 2 when it is not of that
    form (options.validate asks before any work)."""
    if not _FACTORY_FORM.match(spec or ""):
        raise BadInputError(f"--model-factory {spec!r}: expected the form pkg.module:function "
                            "(a module importable from the working directory)")
    mod_name, _, attr = spec.partition(":")
    return mod_name, attr
