"""Runnable blocks in README.md and docs/*.md: finding them, running them, comparing output.

The convention (docs/README.md, "Runnable examples"): a fenced block preceded by the line
`<!-- run -->` (or `<!-- run slow -->` for a block that takes long: its test is marked
`slow`) is run by tests/cli/test_docs_run.py.

- ```` ```console ````: each line starting with `$ ` is a command (a line ending in `\\`
  continues it), run by bash in a fresh folder; the lines after it, up to the next command,
  are the output it is expected to print (stdout and stderr together). A command ends in
  `# exit N` when it is expected to exit N (else 0).
- ```` ```python ````: the block is run as a script; its lines starting with `#> ` are the
  output it is expected to print.

Quoted output is compared line by line after normalising: every number becomes `0`, runs of
spaces become one, the run's folder is removed from paths. `…` in a quoted line stands for
any text; the quoted lines must appear in the real output in order, other lines between
them are allowed. So a number may change, a changed word fails.

Every block runs in its own folder holding the example models `PROVIDED` saves (saved once
per session); `export-gelu` and `python` are the virtual environment's, and the repository
is on PYTHONPATH (so `python -m examples.save_model` works).

A command that is a plain `export-gelu ARGS…`, `python -m export_gelu.examples.save_model
ARGS…`, `python -c "CODE"` or `python FILE.py` (no pipe, `;`, `&&`, `$`, backquote, glob or
quote-escape; `VAR=value` prefixes, set in its environment, and at most a trailing `>
/dev/null`, `2>/dev/null` or `2>&1`) runs in the test's own process instead
(`in_process_command`), and so does a Python block (as `python snippet.py`): the program's
`main`, or the code in a fresh `__main__` (tests/in_process_python.py, which puts back
everything the code may change), in the block's folder with the environment bash would give
it, stdout and stderr into one stream in write order, and for `export-gelu` the tests'
timing (tests/cli_runs.py `TEST_TIMING`: one timed run, no warm-up, unless the command gives
`--iterations`/`--warmup`). That saves a fresh interpreter importing torch per command
(about 4-5 CPU seconds each). Everything else runs in bash (`ls`, `polygraphy`, `python -m
tests.trtexec_standin`, the stand-in device scripts), and so does every command of the
files in `AS_PROGRAM` (docs/cli.md: the installed console script itself; a page whose block
shows an import-time behaviour belongs there too).
`python -m tests.docs_runner` (for writing the docs) runs every command in bash, with the
product's own timing.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from tests.cli_runs import in_process, run_cli_into
from tests.in_process_python import run_python

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- run -->"
#: The marker of a block that takes long (several exports with parity and timing): `slow`.
SLOW_MARKER = "<!-- run slow -->"
#: The example models every block finds in its folder (saved once per session): file name →
#: (example, format) of `python -m examples.save_model EXAMPLE --format FORMAT -o NAME`.
PROVIDED = {"bert.pt": ("bert", "exported"), "gpt2.pt": ("gpt2", "exported"),
            "bert.pkl": ("bert_model", "pickle")}
TIMEOUT_S = 600
_EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
#: Shell syntax that keeps a command in bash (besides the trailing discards `_DISCARD` reads).
_SHELL = re.compile(r"[|&;<>()$`*?\[\]{}~#!\\\n]")
#: A trailing redirection the in-process route honours: `N>/dev/null` (N: 1 or 2) or `2>&1`.
_DISCARD = re.compile(r"\s+([12]?>\s*/dev/null|2>&1)\s*$")
#: `python -c "CODE"` (or single quotes) with nothing bash would expand inside the quotes.
_PYTHON_C = re.compile(r"""python -c (?:"(?P<dq>[^"$`\\]*)"|'(?P<sq>[^']*)')""")
#: A `VAR=value` word before the program: the program's environment.
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
#: Files whose blocks run every command as a program in bash: docs/cli.md's block runs the
#: installed `export-gelu` console script (its start-up, `--version`, `--help`).
AS_PROGRAM = ("docs/cli.md",)
SAVE_MODEL = ["python", "-m", "export_gelu.examples.save_model"]
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        m = _EXIT.search(self.text)
        return int(m.group(1)) if m else 0


@dataclass
class Block:
    path: Path
    line: int
    kind: str  # "console" | "python"
    body: list[str]
    slow: bool = False

    @property
    def name(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"

    def commands(self) -> list[Command]:
        """A console block's commands, each with the output lines quoted after it."""
        commands: list[Command] = []
        continued = False
        for line in self.body:
            if continued:
                commands[-1].text += "\n" + line
                continued = line.endswith("\\")
            elif line.startswith("$ "):
                commands.append(Command(line[2:]))
                continued = line.endswith("\\")
            elif commands and line.strip():
                commands[-1].expected.append(line)
        return commands

    def python_expected(self) -> list[str]:
        return [line[3:] for line in self.body if line.startswith("#> ")]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def find_blocks(path: Path) -> list[Block]:
    """The blocks of `path` marked runnable: a fence right after the marker line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() not in (MARKER, SLOW_MARKER) or i + 1 >= len(lines):
            continue
        fence = lines[i + 1].strip()
        if not fence.startswith("```") or fence[3:] not in ("console", "python"):
            raise ValueError(f"{path.name}:{i + 1}: {MARKER} must be followed by a ```console "
                             f"or ```python fence, not {fence!r}")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        blocks.append(Block(path, i + 2, fence[3:], lines[i + 2:end],
                            slow=line.strip() == SLOW_MARKER))
    return blocks


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in find_blocks(p)]


def normalise(line: str, folder: Path | None = None) -> str:
    """A line as compared: the run's folder removed, numbers as 0, spaces collapsed."""
    if folder is not None:
        line = line.replace(f"{folder}/", "").replace(str(folder), ".")
    line = line.replace(f"{ROOT}/", "")
    line = _NUMBER.sub("0", line)
    return " ".join(line.split())


def _pattern(expected: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in normalise(expected).split("…")]
    return re.compile(".*".join(parts))


def missing_lines(expected: list[str], actual: str, folder: Path | None = None) -> list[str]:
    """The quoted lines not found, in order, in the real output (empty: all found)."""
    got = [normalise(line, folder) for line in actual.splitlines()]
    at = 0
    for i, want in enumerate(expected):
        if normalise(want) in ("", "0"):
            continue
        pattern = _pattern(want)
        hit = next((j for j in range(at, len(got)) if pattern.fullmatch(got[j])), None)
        if hit is None:
            return expected[i:]
        at = hit + 1
    return []


def environment() -> dict[str, str]:
    """`export-gelu` and `python` from this interpreter's environment; the repository first."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "100"
    env.pop("EXPORT_GELU_EXTERNAL_DATA_THRESHOLD", None)
    return env


def run_shell(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=folder, env=environment(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class InProcess:
    """A command the test's process can run itself: which program, its arguments, and
    whether its stdout and stderr reach the compared output (else /dev/null)."""

    program: str  # "export-gelu" | "save_model" | "python" (args: ["-c", CODE] or [FILE])
    args: list[str]
    stdout: bool = True
    stderr: bool = True
    env: dict[str, str] = field(default_factory=dict)  # `VAR=value` prefixes


def in_process_command(text: str) -> InProcess | None:
    """`text` as a command this process can run (None: bash runs it). A plain
    `export-gelu ARGS…`, `python -m export_gelu.examples.save_model ARGS…` or `python
    FILE.py`, shlex-split, with nothing a shell would expand or connect (`VAR=value`
    prefixes go into its environment), or `python -c` with one quoted argument bash passes
    as written; trailing `>/dev/null`, `2>/dev/null` and
    `2>&1` are applied left to right as bash applies them."""
    text = _EXIT.sub("", text).replace("\\\n", " ").rstrip()
    redirections: list[str] = []
    while (m := _DISCARD.search(text)) is not None:
        redirections.insert(0, m.group(1).replace(" ", ""))
        text = text[:m.start()]
    found = _program(text)
    if found is None:
        return None
    program, args, env = found
    kept = {1: True, 2: True}  # True: into the compared stream; False: /dev/null
    for r in redirections:
        if r == "2>&1":
            kept[2] = kept[1]
        else:
            kept[2 if r.startswith("2") else 1] = False
    return InProcess(program, args, kept[1], kept[2], env)


def _program(text: str) -> tuple[str, list[str], dict[str, str]] | None:
    """The program, arguments and `VAR=value` prefixes of a command without redirections
    (None: bash runs it)."""
    if (m := _PYTHON_C.fullmatch(text)) is not None:
        code = m.group("dq") if m.group("dq") is not None else m.group("sq")
        return "python", ["-c", code], {}
    if _SHELL.search(text):
        return None
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    env = {}
    while words and _ASSIGNMENT.fullmatch(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words[:1] == ["export-gelu"]:
        return "export-gelu", words[1:], env
    if words[:3] == SAVE_MODEL:
        return "save_model", words[3:], env
    if len(words) == 2 and words[0] == "python" and words[1].endswith(".py") and \
            not words[1].startswith("-"):
        return "python", words[1:], env
    return None


def _save_model(args: list[str]) -> int:
    """`python -m export_gelu.examples.save_model ARGS`, here: its exit code."""
    from export_gelu.examples import save_model

    argv0, sys.argv[0] = sys.argv[0], save_model.__file__  # argparse's `prog`, as with -m
    try:
        return save_model.main(args)
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - as the interpreter would end: traceback, exit 1
        traceback.print_exc()
        return 1
    finally:
        sys.argv[0] = argv0


def run_in_process(command: InProcess, folder: Path) -> tuple[int, str]:
    """Run `command` in this process in `folder`, with the environment bash would give it:
    the exit code and what it printed (stdout and stderr in write order)."""
    shown, dropped = io.StringIO(), io.StringIO()
    out = shown if command.stdout else dropped
    err = shown if command.stderr else dropped
    env: dict[str, str | None] = {**environment(), "EXPORT_GELU_EXTERNAL_DATA_THRESHOLD": None,
                                  **command.env}
    if command.program == "export-gelu":
        code = run_cli_into(out, err, *command.args, env=env, cwd=folder)
    elif command.program == "python":
        code = run_python(command.args, out, err, env, folder)
    else:
        with in_process(out, err, env, folder):
            code = _save_model(command.args)
    return code, shown.getvalue()


def run_command(text: str, folder: Path, block: Block | None = None) -> tuple[int, str]:
    """Run one command of a block in `folder`: in this process when `in_process_command`
    allows it (and the block's file is not in `AS_PROGRAM`), else in bash. The exit code and
    what it printed."""
    as_program = block is not None and block.name.split(":")[0] in AS_PROGRAM
    command = None if as_program else in_process_command(text)
    if command is not None:
        return run_in_process(command, folder)
    done = run_shell(text, folder)
    return done.returncode, done.stdout


def provide(cache: Path) -> None:
    """Save the PROVIDED examples into `cache` (once)."""
    for name, (example, fmt) in PROVIDED.items():
        if not (cache / name).exists():
            command = f"python -m examples.save_model {example} --format {fmt} -o {name}"
            done = run_shell(command, cache)
            if done.returncode:
                raise RuntimeError(f"{command} failed:\n{done.stdout}")


def prepare(folder: Path, saved: dict[str, Path]) -> None:
    """Copy the PROVIDED examples (`saved`: name → path) into a block's folder."""
    for name in PROVIDED:
        shutil.copy2(saved[name], folder / name)


def run_block(block: Block, folder: Path) -> list[str]:
    """Run `block` in `folder`; the problems found (empty: it ran as documented)."""
    if block.kind == "python":
        script = folder / "snippet.py"
        script.write_text("\n".join(block.body) + "\n", encoding="utf-8")
        steps = [Command("python snippet.py", block.python_expected())]
    else:
        steps = block.commands()
    problems = []
    for command in steps:
        code, printed = run_command(command.text, folder, block)
        if code != command.exit_code:
            problems.append(f"$ {command.text}\nexited {code}, the docs say "
                            f"{command.exit_code}; it printed:\n{printed}")
            break
        missing = missing_lines(command.expected, printed, folder)
        if missing:
            problems.append(f"$ {command.text}\nthis quoted line is not in the output "
                            f"(numbers may differ, words may not):\n  {missing[0]}\n"
                            f"the command printed:\n{printed}")
            break
    return problems


def show(names: list[str]) -> None:
    """Print what each block's commands print now (for writing the docs): python -m
    tests.docs_runner [README.md:LINE | FILE.md ...]."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        provide(cache)
        saved = {name: cache / name for name in PROVIDED}
        files = [Path(n).resolve() for n in names if n.endswith(".md")]
        blocks = [b for f in files for b in find_blocks(f)] if files else all_blocks()
        for block in blocks:
            if names and not files and block.name not in names:
                continue
            folder = Path(tmp) / f"block{block.line}"
            folder.mkdir()
            prepare(folder, saved)
            print(f"=== {block.name}")
            commands = (block.commands() if block.kind == "console"
                        else [Command("python snippet.py")])
            if block.kind == "python":
                (folder / "snippet.py").write_text("\n".join(block.body) + "\n")
            for command in commands:
                done = run_shell(command.text, folder)
                print(f"$ {command.text}   [exit {done.returncode}]")
                print(done.stdout.replace(f"{folder}/", ""))


if __name__ == "__main__":
    show(sys.argv[1:])
