"""The Python API's keywords, read by the flag declarations: each flag's keywords (its names by
one rule, `declare.keyword_of`) → the value under the flag's key, as the command line's parser
stores it; a keyword that is none raises KeywordError naming the one meant; the function's
signature, for help() and editors, lists every keyword with its default."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence

from export_gelu.errors import BadInputError
from export_gelu.flags.declare import Flag

#: What a wrong keyword's message says about the rule.
RULE = ("the keywords are the flags' names: dashes as underscores, --no-X as X=False, "
        "--import as imports")


class KeywordError(BadInputError, TypeError):
    """A keyword the API does not take (exit 2 from the CLI's point of view; a TypeError to
    Python), naming the keyword meant."""


def keyword_error(function: str, name: str, known: Sequence[str],
                  instead: Mapping[str, str]) -> KeywordError:
    """`function() has no keyword NAME: use ...`, with the name meant (from `instead`, else the
    closest known keyword), else the list of keywords."""
    import difflib

    hint = instead.get(name)
    if hint is None:
        close = difflib.get_close_matches(name, known, n=1)
        hint = close[0] if close else None
    tail = f": use {hint}" if hint else f"; it takes {', '.join(sorted(known))}"
    return KeywordError(f"{function}() has no keyword {name!r}{tail} ({RULE})")


def keyword_values(function: str, flags: Sequence[Flag], given: Mapping[str, object], *,
                   known: Sequence[str] = (), renamed: Mapping[str, str] | None = None,
                   instead: Mapping[str, str] | None = None) -> dict[str, object]:
    """`given` keywords → {flag key: value} for the flags `function` takes. Switches given
    under two names (`allow_pickle`, `trust_model`) are on if either is; another flag given
    twice is refused. `renamed`: keywords of an earlier release → the keyword now (with a
    DeprecationWarning). Anything else raises KeywordError (`known`: the function's other
    parameters, for the hint)."""
    by_keyword = {k: f for f in flags for k in f.api_keywords}
    names = [*by_keyword, *known]
    values: dict[str, object] = {}
    for name, value in given.items():
        flag = by_keyword.get(name)
        if flag is None and renamed and name in renamed:
            warnings.warn(f"{function}(): {name}= is {renamed[name]}= now (the flag's name); "
                          f"{name}= will go", DeprecationWarning, stacklevel=4)
            flag = by_keyword[renamed[name]]
        if flag is None:
            raise keyword_error(function, name, names, instead or {})
        if flag.key in values:
            if flag.kind != "switch":
                raise KeywordError(f"{function}(): {' and '.join(flag.api_keywords)} are one "
                                   f"flag ({flag.usage()}); give one of them")
            value = bool(values[flag.key]) or value
        values[flag.key] = value
    return values


def with_keywords(func: Callable[..., object], flags: Sequence[Flag], own: Sequence[str] = ()
                  ) -> inspect.Signature:
    """`func`'s signature with its `**keywords` spelled out: one keyword-only parameter per
    flag keyword (its default and annotation), after the parameters it declares itself
    (`own`: keywords it declares by position too, left out)."""
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    taken = {p.name for p in params} | set(own)
    spelled = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=f.default_value,
                                 annotation=f.keyword_type)
               for f in flags for k in f.api_keywords if k not in taken]
    return sig.replace(parameters=[*params, *spelled])
