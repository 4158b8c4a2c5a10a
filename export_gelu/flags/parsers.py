"""argparse parsers built from the flag declarations: every flag a parser reads is added by the
one `add_argument` call below, in its group, in the order the declarations list it. The
developer tools' small parsers (`python -m export_gelu.report.schema`, …) are built the same
way, from a tuple of `ToolFlag`s (`tool_parser`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from export_gelu.flags.declare import Flag, ParserSpec


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit 2 (the full usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class ParagraphFormatter(argparse.HelpFormatter):
    """`--help` wrapped to the terminal, but text of several lines (the examples and exit
    codes) printed as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip("\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def argparse_options(flag: Flag, spec: ParserSpec) -> dict[str, Any]:
    """The keyword arguments of `add_argument` for one declared flag."""
    if flag.kind == "version":
        return {"action": "version", "version": spec.version}
    options: dict[str, Any] = {"help": flag.help or None}
    if flag.kind == "positional":
        return {**options, "metavar": flag.metavar, "nargs": flag.nargs}
    options["dest"] = flag.key
    if flag.kind == "switch":
        return {**options, "action": "store_false" if flag.negated else "store_true"}
    if flag.kind == "repeat":
        options.update(action="append", default=[])
    else:
        options["default"] = flag.default
    if flag.parse is not None:
        options["type"] = flag.parse
    if flag.choices is not None:
        options["choices"] = flag.choices
    if flag.metavar is not None:
        options["metavar"] = flag.metavar
    return options


def build_parser(spec: ParserSpec, flags: Sequence[Flag]) -> argparse.ArgumentParser:
    """The parser `spec` names, with every flag of `flags` it reads, group by group."""
    parser = OneLineErrorParser(prog=spec.prog, usage=spec.usage, description=spec.description,
                                epilog=spec.epilog,
                                formatter_class=ParagraphFormatter)
    groups: dict[str, argparse.ArgumentParser | argparse._ArgumentGroup] = {
        key: parser if title is None else parser.add_argument_group(title)
        for key, title in spec.groups}
    for key, _title in spec.groups:
        for flag in flags:
            if flag.group == key and spec.name in flag.parsers:
                groups[key].add_argument(*flag.names, **argparse_options(flag, spec))
    unplaced = [f.names for f in flags if spec.name in f.parsers and f.group not in groups]
    if unplaced:
        raise ValueError(f"{spec.prog}: flags in no group of the parser: {unplaced}")
    return parser


@dataclass(frozen=True)
class ToolFlag:
    """One flag of a developer tool's parser: argparse's names and its keyword arguments."""

    names: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)


def tool_parser(description: str, flags: Sequence[ToolFlag],
                formatter: type[argparse.HelpFormatter] = argparse.HelpFormatter
                ) -> argparse.ArgumentParser:
    """A developer tool's argparse parser, with `flags` in order."""
    parser = argparse.ArgumentParser(description=description, formatter_class=formatter)
    for flag in flags:
        parser.add_argument(*flag.names, **flag.options)
    return parser
