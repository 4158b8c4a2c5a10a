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
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
        done = run_shell(command.text, folder)
        if done.returncode != command.exit_code:
            problems.append(f"$ {command.text}\nexited {done.returncode}, the docs say "
                            f"{command.exit_code}; it printed:\n{done.stdout}")
            break
        missing = missing_lines(command.expected, done.stdout, folder)
        if missing:
            problems.append(f"$ {command.text}\nthis quoted line is not in the output "
                            f"(numbers may differ, words may not):\n  {missing[0]}\n"
                            f"the command printed:\n{done.stdout}")
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
