"""May a model load read this file? One containment rule for every file a load reads that the
user did not name themselves (docs/safety.md, "What a load may read").

Such a file is a Hugging Face folder's own file (`config.json`, `model.safetensors`, every
other entry of the folder), a shard its weight index names, or the external data an ONNX file
names. Each is resolved once, every symlink on its way followed, and must land inside the
model's root:

- a folder: the folder itself (resolved);
- an ONNX file: the folder it lies in (resolved);
- a folder in the Hugging Face cache (`…/models--org--name/snapshots/<rev>/`): the cache's
  repo folder `models--org--name/`, because the cache stores each snapshot's files as links
  to `../../blobs/<hash>` of the same repo; a link out of that repo is refused like any other.
"""

from __future__ import annotations

from pathlib import Path

from export_gelu.errors import BadInputError

#: The Hugging Face cache names a model repo's folder so (`models--org--name`).
HF_CACHE_REPO_PREFIX = "models--"


def model_root(folder: Path) -> Path:
    """The folder everything a load of `folder`'s model reads must resolve inside."""
    real = folder.resolve()
    repo = real.parent.parent
    if real.parent.name == "snapshots" and repo.name.startswith(HF_CACHE_REPO_PREFIX):
        return repo
    return real


def contained(root: Path, base: Path, name: str, source: object, what: str) -> Path:
    """`base / name` with every symlink resolved; exit 2 naming `source` and `what` unless it
    lies inside `root` (an absolute name, an empty one or a NUL byte is refused too)."""
    if not name or "\x00" in name or Path(name).is_absolute():
        raise BadInputError(f"{source}: {what} {name!r}, which lies outside the model's folder; "
                            "refusing to read it")
    try:
        target = (base / name).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise BadInputError(f"{source}: {what} {name!r}, which cannot be resolved ({exc})") from exc
    if not target.is_relative_to(root):
        raise BadInputError(f"{source}: {what} {name!r}, which lies outside the model's folder (it "
                            f"resolves to {target}); refusing to read it")
    return target
