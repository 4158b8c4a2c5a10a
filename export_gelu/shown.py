"""How a string that is not ours is shown: one rule for the terminal, the reports and plots.

A model's input, output and node names, its namespaces and stack traces, a GELU form's name
in a bundle's manifest, a device's build log: each is text someone else wrote, and each can
hold what a terminal obeys (ESC sequences that move the cursor, recolour, retitle the window
or, through OSC 8, plant links; a CR that overwrites the line; C1 controls, which some
terminals read as ESC) or what Markdown and HTML render (a backtick closing a code span,
`<img src=…>`, `[text](url)`), and can be megabytes long. So every such string is shown
through this module (docs/safety.md, "Names are data"):

- `shown(text)`: one name on one line: every control character (C0 with CR, LF and TAB, DEL,
  C1), the Unicode line and paragraph separators and the invisible format characters that
  reorder or hide text (bidirectional overrides and isolates, zero-width characters) written
  as a visible escape (`\\x1b`, `\\u202e`); longer than `limit` characters: its head and
  tail around `…`.
- `terminal(text)`: a whole multi-line text about to be printed: the same escapes for every
  control but LF and TAB, so no escape sequence reaches the terminal whatever was missed.
- `md_text(text)` / `md_code(text)`: a name for a Markdown report, as text (Markdown
  punctuation escaped, `<`, `>` and `&` as entities) or as a code span whose fence is longer
  than any run of backticks inside it.
- `label(text)`: a plot label: `shown` at 80 characters, `$` escaped (matplotlib reads
  `$…$` as math).
- `printable(path)`: a path for a message, printable even when its bytes are not UTF-8.
"""

from __future__ import annotations

import re

#: Longer names are shown as their head and tail around "…".
NAME_LIMIT = 200
#: A plot label's length at most (a multi-megabyte node name made matplotlib give up).
LABEL_LIMIT = 80

#: Characters that control a terminal or hide and reorder text: C0 but TAB and LF (added back
#: for one name), DEL and C1; ALM, soft-hyphen-free zero-width and joiner characters, LRM and
#: RLM, the line and paragraph separators, the bidirectional embeddings, overrides and
#: isolates, invisible operators, the byte-order mark; lone surrogates (undecodable bytes).
_HIDDEN = ("\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e"
           "\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff")
_TERMINAL = re.compile(f"[{_HIDDEN}]")
_NAME = re.compile(f"[{_HIDDEN}\t\n]")
_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!~])")
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shorten(text: str, limit: int = NAME_LIMIT) -> str:
    """`text`, or its head and tail around "…" when it is longer than `limit`."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def shown(text: object, limit: int = NAME_LIMIT) -> str:
    """One untrusted name on one line: shortened to `limit` characters (0: whole), then every
    control, separator and hiding character written as a visible escape."""
    return _NAME.sub(_escape, shorten(str(text), limit))


def terminal(text: str) -> str:
    """A whole text about to be printed: every control but LF and TAB (and every hiding
    character) as a visible escape."""
    return _TERMINAL.sub(_escape, text)


def md_text(text: object, limit: int = NAME_LIMIT) -> str:
    """An untrusted name as Markdown text: `shown`, then Markdown punctuation
    backslash-escaped and `<`, `>`, `&` as HTML entities."""
    escaped = _MD_PUNCT.sub(r"\\\1", shown(text, limit))
    return "".join(_MD_ENTITIES.get(c, c) for c in escaped)


def md_code(text: object, limit: int = NAME_LIMIT) -> str:
    """An untrusted name as a Markdown code span: `shown`, fenced by one backtick more than
    its longest run of backticks (padded with a space where it starts or ends with one)."""
    body = shown(text, limit)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if not body or body.startswith("`") or body.endswith("`"):
        body = f" {body} "
    return f"{fence}{body}{fence}"


def label(text: object, limit: int = LABEL_LIMIT) -> str:
    """A plot label: `shown` at `limit` characters, with `$` escaped (matplotlib's mathtext
    reads `$…$` as a formula)."""
    return shown(text, limit).replace("$", r"\$")


def printable(path: object) -> str:
    """A path for a message, printable even when it is not UTF-8 (as bytes or as the
    surrogates os.fsdecode makes of them)."""
    if isinstance(path, bytes):
        path = path.decode("utf-8", "surrogateescape")
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")
