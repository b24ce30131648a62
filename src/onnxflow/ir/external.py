"""Opening an external-data file once, inside the model's folder, and checking what was opened.

The path is walked from a descriptor of the folder, one component at a time, each opened with
``O_NOFOLLOW`` relative to the directory before it, so the kernel never follows a link on our
behalf. A symbolic link met on the way is read (``readlink``) and followed by the walk itself:
``..`` goes back up the directories already held and may not climb above the folder, and an
absolute target must lie under the folder's real path. So whatever is renamed or swapped while
the walk runs, the descriptor returned is of a file that was inside the folder when it was
opened: there is no second open by name for a swap to redirect. The caller checks the
descriptor (``os.fstat``) and reads from it.

Platforms without ``dir_fd`` and ``O_NOFOLLOW`` (Windows) resolve the path, check it, and open
it by name: the same refusals, without the guarantee against a concurrent swap.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from onnxflow.errors import ExternalDataError

#: Symbolic links followed in one location before it is refused (Linux's own limit).
MAX_LINKS = 40

_WALKS = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: The last component: never a link, never blocking (a FIFO opens at once, then is refused).
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_DIRECTORY", 0)


def open_inside(folder: str | os.PathLike, location: str, what: str) -> int:
    """A read-only descriptor of the file ``location`` (relative, ``/``-separated) names inside
    ``folder``; the caller closes it. Raises :class:`ExternalDataError` naming ``what`` when the
    location leaves the folder or names the folder itself, ``OSError`` when a component is
    missing or unreadable. The descriptor may be of any kind of file: ``fstat`` it."""
    root = os.path.realpath(folder)
    if not _WALKS:
        return _open_checked(Path(root), location, what)
    dirs = [os.open(root, _DIR_FLAGS & ~_NOFOLLOW)]
    try:
        return _walk(dirs, _parts(location), root, what)
    finally:
        for fd in dirs:
            os.close(fd)


def _parts(path: str) -> list[str]:
    """``path``'s components, last first (a stack), without empty and ``.`` ones."""
    return [p for p in reversed(path.split("/")) if p not in ("", ".")]


def _walk(dirs: list[int], pending: list[str], root: str, what: str) -> int:
    """Open ``pending`` (a stack of components) from ``dirs[-1]``, pushing the directories it
    passes onto ``dirs`` and a link's target onto ``pending``; return the last component's
    descriptor."""
    links = 0
    while pending:
        name = pending.pop()
        if name == "..":
            if len(dirs) == 1:
                raise ExternalDataError(f"{what}: resolves outside the model directory {root!r}")
            os.close(dirs.pop())
            continue
        last = not pending
        try:
            fd = os.open(name, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=dirs[-1])
        except OSError as exc:
            links += 1
            if links > MAX_LINKS:
                raise ExternalDataError(f"{what}: more than {MAX_LINKS} symbolic links") from exc
            pending.extend(_link_parts(dirs, name, exc, root, what))
            continue
        if last:
            return fd
        dirs.append(fd)
    raise ExternalDataError(f"{what}: not a regular file (a directory)")


def _link_parts(dirs: list[int], name: str, exc: OSError, root: str, what: str) -> list[str]:
    """Components to walk instead of ``name``, which ``os.open`` refused with ``exc``: its
    target's when it is a symbolic link (an absolute target restarts from the folder: ``dirs``
    is cut back to it), ``name`` again when it stopped being one meanwhile; else ``exc``."""
    try:
        target = os.readlink(name, dir_fd=dirs[-1])
    except OSError:
        if exc.errno == errno.ELOOP:  # it was a link when opened, it is not now: open it again
            return [name]
        raise exc from None
    if not os.path.isabs(target):
        return _parts(target)
    if not Path(target).is_relative_to(root):  # by components: ``..`` in it is walked as such
        raise ExternalDataError(f"{what}: resolves outside the model directory {root!r}")
    while len(dirs) > 1:
        os.close(dirs.pop())
    return _parts("/".join(Path(target).parts[len(Path(root).parts) :]))


def _open_checked(root: Path, location: str, what: str) -> int:
    """Where the walk is not available: resolve, check that it stays inside, open by name."""
    target = (root / location).resolve()
    if not target.is_relative_to(root):
        raise ExternalDataError(f"{what}: resolves outside the model directory {str(root)!r}")
    return os.open(target, os.O_RDONLY | getattr(os, "O_BINARY", 0))
