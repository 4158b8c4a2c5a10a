"""A staged bundle swapped into place: the old folder's entries that are not the bundle's own
kept, the two folders exchanged in one step where the system can, else moved aside and in."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.atomic import placed, signals_deferred
from export_gelu.errors import BadInputError

if TYPE_CHECKING:
    pass
from export_gelu.device.bundle_layout import entries_under, is_own, own_files, read_manifest


def replace_dir(stage: Path, out: Path, tmp: Path) -> None:
    """Put `stage` at `out` in one step. An earlier bundle there gives way: its own files go
    (own_files); every other entry is hard-linked (copied where links fail) into `stage`
    first, so it exists throughout, then the two folders are swapped."""
    if out.is_dir():
        own = own_files(read_manifest(out)) if any(out.iterdir()) else set()
        _keep_entries(out, stage, own)
        shutil.copymode(out, stage)
    with signals_deferred():
        if not out.exists():
            os.replace(stage, out)
            placed(out)  # a new folder, all of it this run's: removed if the run fails
        elif not _exchange(stage, out):  # no atomic swap here: aside, in, and back on failure
            aside = tmp / "previous"
            os.replace(out, aside)
            try:
                os.replace(stage, out)
            except BaseException:
                os.replace(aside, out)
                raise


def _keep_entries(old: Path, stage: Path, own: set[str]) -> None:
    """Every entry of `old` that is not one of `own` into `stage`, at the same place (the
    folders made for them take their old permissions)."""
    ours = {p for p in stage.rglob("*") if p.is_dir()}
    for rel in entries_under(old):
        if is_own(rel, own):
            continue
        src, dst = old / rel, stage / rel
        if src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
            continue  # an empty folder the new bundle has too
        if os.path.lexists(dst):
            raise BadInputError(f"--bundle {old}: {rel} is not one of the earlier bundle's own "
                                "files and the new bundle writes there; move it out")
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
            elif src.is_dir():
                dst.mkdir()
            else:
                _link_or_copy(src, dst)
        except OSError as exc:
            raise BadInputError(f"--bundle {old}: cannot keep {rel} in the new bundle "
                                f"({exc.strerror or exc}); move it out") from exc
    for made in sorted(p for p in stage.rglob("*") if p.is_dir() and not p.is_symlink()
                       and p not in ours):
        shutil.copystat(old / made.relative_to(stage), made, follow_symlinks=False)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        if not src.is_file():
            raise
        shutil.copy2(src, dst)  # another owner's file (protected_hardlinks), or no links


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 with RENAME_EXCHANGE); False where the
    system or the filesystem has no such call."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # no such call (or no C library by None)
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
