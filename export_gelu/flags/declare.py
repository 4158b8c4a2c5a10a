"""How a flag is declared: one `Flag` record says how the command line reads it, how the Python
API takes it and which options-record field holds it; `ParserSpec` says what a parser prints
around its flags, `RecordSpec` and `ApiSpec` which record and which API function a command
has. The records of export-gelu's own flags are export_gelu/flag_table/table.py.

Everything else is generated from the records: the argparse parsers (`parsers.py`), the
options records' fields and the API's keyword types (`source.py`, written to
export_gelu/option_records.py), the API's keywords (`keywords.py`) and docs/cli.md's tables.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The commands: `compare-forms` is `export-gelu MODEL --compare-forms` (export's parser) and
#: export_gelu.compare_forms().
COMMANDS = ("export", "compare-forms", "verify", "inspect")
#: The parser that reads each command's flags.
PARSER_OF = {"export": "export", "compare-forms": "export", "verify": "verify",
             "inspect": "inspect"}
#: The options record each command builds (RecordSpec.key); "run" is the one they all extend.
RECORD_OF = {"export": "export", "compare-forms": "forms", "verify": "verify",
             "inspect": "inspect"}
#: What a flag is: a value (`--opset N`), a switch (`--static`, `--no-verify`), a repeatable
#: value (`--input`, given once per item), an argument by position (MODEL), `--version`.
KINDS = ("value", "switch", "repeat", "positional", "version")


def keyword_of(option: str) -> str:
    """The rule from a flag to its API keyword: `--report-md` → report_md, `--no-verify` →
    verify (verify=False), a Python keyword with an `s` (`--import` → imports)."""
    name = option.lstrip("-").replace("-", "_")
    name = name[3:] if name.startswith("no_") else name
    return name + "s" if keyword.iskeyword(name) else name


@dataclass(frozen=True)
class Flag:
    """One flag of one or more commands (or an argument by position, or a keyword only the
    Python API takes: no `names`)."""

    names: tuple[str, ...]  # ("-o", "--output"); a positional: its name; API only: ()
    help: str = ""
    commands: tuple[str, ...] = ()  # of COMMANDS
    group: str = "options"  # the --help group, a key of ParserSpec.groups
    kind: str = "value"  # of KINDS
    parse: Callable[[str], Any] | None = None  # how the CLI reads the text (int, float, ...)
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None  # a positional that may be left out: "?"
    keywords: tuple[str, ...] = ()  # the API's names (default: every long name by the rule)
    field: str | None = None  # the record field (default: the first keyword, with `records`)
    records: tuple[str, ...] = ()  # the RecordSpec keys that hold it; () : no record does
    type: str = ""  # the field's annotation (default: from kind, parse and default)
    api_type: str = ""  # the API keyword's annotation (default: from the field's)
    path: bool = False  # a file or folder: the API takes a str or an os.PathLike

    def __post_init__(self) -> None:
        if self.kind not in KINDS or not set(self.commands) <= set(COMMANDS):
            raise ValueError(f"flag {self.names}: kind {self.kind!r}, commands {self.commands}")

    @property
    def negated(self) -> bool:
        """`--no-X`: the keyword and the field are X, True unless the flag is given."""
        return any(n.startswith("--no-") for n in self.names)

    @property
    def api_keywords(self) -> tuple[str, ...]:
        """The Python API's keywords for this flag, the first the one it is stored under."""
        if self.keywords or self.kind in ("positional", "version"):
            return self.keywords
        return tuple(dict.fromkeys(keyword_of(n) for n in self.names if n.startswith("--")))

    @property
    def key(self) -> str:
        """Where the flag's value is kept: argparse's dest and the API's first keyword."""
        return self.api_keywords[0] if self.api_keywords else self.names[0].lstrip("-")

    @property
    def field_name(self) -> str | None:
        """The options-record field that holds the value (None: a setting of the run)."""
        return (self.field or self.key) if self.records else None

    @property
    def parsers(self) -> tuple[str, ...]:
        """The command-line parsers that read the flag (none: the API's only)."""
        if not self.names:
            return ()
        return tuple(dict.fromkeys(PARSER_OF[c] for c in self.commands))

    @property
    def default_value(self) -> Any:
        """The value when not given: a switch is off (a --no-X switch on), a repeat empty."""
        if self.kind == "switch":
            return self.negated
        if self.kind == "repeat" and self.default is None:
            return ()
        return self.default

    @property
    def field_type(self) -> str:
        """The record field's annotation, as options.check_types reads it."""
        if self.type:
            return self.type
        if self.kind == "switch":
            return "bool"
        if self.kind == "repeat":
            return "tuple[str, ...]"
        base = "int" if self.parse is int else "float" if self.parse is float else "str"
        return base if self.default is not None else f"{base} | None"

    @property
    def keyword_type(self) -> str:
        """The API keyword's annotation: paths as str or os.PathLike, sequences as any."""
        if self.api_type:
            return self.api_type
        if self.kind == "repeat":
            return "Sequence[str] | str"
        if self.path:
            return "str | PathLike[str]" + (" | None" if self.default is None else "")
        return self.field_type

    def usage(self) -> str:
        """How `--help` names the flag: `--inputs FILE.npz`, `--static` (the API's: keyword)."""
        if not self.names:
            return f"{self.key}= (the API's)"
        name = next((n for n in self.names if n.startswith("--")), self.names[0])
        if self.kind in ("switch", "version", "positional"):
            return self.metavar or name
        value = self.metavar or ("|".join(self.choices) if self.choices else self.key.upper())
        return f"{name} {value}"


@dataclass(frozen=True)
class ParserSpec:
    """What a command-line parser prints around its flags, and their groups in order."""

    name: str  # a value of PARSER_OF
    prog: str
    description: str
    epilog: str
    groups: tuple[tuple[str, str | None], ...]  # (key, title); None: argparse's own group
    usage: str | None = None  # None: argparse's
    version: str = ""  # what a `version` flag prints


@dataclass(frozen=True)
class RecordSpec:
    """An options record: its class, the one it extends, the command it is built for."""

    key: str  # "run" (every record's fields) or a value of RECORD_OF
    name: str  # the class
    doc: str
    base: str = "RunOptions"


@dataclass(frozen=True)
class ApiSpec:
    """A Python API function: the commands whose flags are its keywords, the TypedDict that
    types them, and the keywords it declares as parameters of its own."""

    function: str
    typed: str  # the TypedDict class
    commands: tuple[str, ...]
    cli_only: bool = False  # only the flags a parser reads (export(): export's parser)
    own: tuple[str, ...] = ()  # keywords the function declares itself (by position too)

    def flags(self, flags: tuple[Flag, ...]) -> list[Flag]:
        """The flags whose keywords the function takes, in declaration order."""
        return [f for f in flags if f.api_keywords and set(f.commands) & set(self.commands)
                and (f.names or not self.cli_only)]
