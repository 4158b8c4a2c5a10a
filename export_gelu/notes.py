"""A report note: its words, and a stable code that tools and tests match on (the words may
change; the code does not). The report's JSON writes each note as {"code", "message"}."""

from __future__ import annotations

from collections.abc import Iterable

#: The code of a note added without one (a test keeps real reports free of them).
UNCLASSIFIED = "unclassified"


class Note(str):
    """A note's message (it is the string) and its `code`."""

    code: str

    def __new__(cls, message: str, code: str = UNCLASSIFIED) -> Note:
        note = super().__new__(cls, message)
        note.code = code
        return note

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": str(self)}


def tagged(code: str, messages: Iterable[str | None]) -> list[Note]:
    """`messages` as notes of `code` (empty ones dropped; a Note keeps its own code)."""
    return [m if isinstance(m, Note) else Note(m, code) for m in messages if m]


def note_json(note: str) -> dict[str, str]:
    """A note as the report writes it."""
    return note.to_json() if isinstance(note, Note) else Note(note).to_json()
