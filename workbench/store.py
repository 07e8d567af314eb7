"""The directory transaction: a directory of files that a reader sees whole, one version at a time.

What the checkpoint format (``checkpoint.py``) and the Hugging Face wrapper (``hf``) build on;
it knows nothing of models.

Writing (``atomic_directory``): the new version is written complete under a temporary name beside
the destination and swapped with the old one by one atomic ``renameat2(RENAME_EXCHANGE)``: there is
no instant with no version at the path. The temporary is created under a name no clean-up touches,
locked (``flock``), and only then renamed to the ``.NAME.tmp-*`` name clean-ups look for, so a
concurrent save never removes a temporary another save is filling. Where the exchange is
unavailable (not Linux, some network filesystems) the old version is first renamed aside
(``.NAME.old-*``); a kill between the two renames leaves it there, where loads find it and the next
save puts it back. The next successful save deletes what interrupted saves left. (A NAME so long that
these would pass the file system's name limit is shortened, with a hash of the whole: ``sibling_stem``.)

What a save may replace: a directory the caller's ``owned`` recognises by a marker of its own
(never by generic file names such as ``config.json``), or an empty one; anything else, a file, a
symbolic link or a write-protected directory is refused before a byte is written. Files inside the
old version that ``owned`` does not claim (the user's notes, a tokenizer) are carried into the new
version (hard links); a save that would overwrite one of them is refused and names it.

Reading (``read_version``): the directory is opened once and every file read through that handle,
so one read sees one version even while a writer swaps another in; a version deleted under a
reader is read again from the new one. Only regular files are opened, never followed through a
symbolic link, and never read past the size the caller expects (a FIFO, a device or a link to
``/dev/zero`` is refused by name instead of blocking or filling memory).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import hashlib
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from .files import CheckpointError, current_umask

READ_ATTEMPTS = 200  # a reader retries while writers keep replacing the version it opened

T = TypeVar("T")
Owned = Callable[[Path], "set[str] | None"]  # the names of a version its writer claims; None: not a version


class MissingFile(FileNotFoundError):
    """A file a version should hold is not there: a ``CheckpointError`` saying ``message`` if the version
    stays put, a retry if it was a version being deleted under the reader (``read_version``)."""

    def __init__(self, message: str, filename: str) -> None:
        super().__init__(2, "missing file", filename)
        self.message = message


# ---------------------------------------------------------------------------------------------- what may be replaced
def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _listing(path: Path) -> str:
    names = sorted(p.name for p in path.iterdir())
    return f"{names[:6]}{' ...' if len(names) > 6 else ''}"


def check_replaceable(path: Path, owned: Owned) -> set[str] | None:
    """The names ``owned`` claims in the directory at ``path`` (None: nothing there to replace);
    anything a save must not replace is refused, naming what it is. A directory that another saver
    swaps while we look is looked at again, never refused for being caught half-moved."""
    for _ in range(100):
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                what = f"a symbolic link (to {os.readlink(path)}): save to its target instead"
            elif not stat.S_ISDIR(st.st_mode):
                what = "a file, not a directory"
            elif not st.st_mode & stat.S_IWUSR:
                what = (f"write-protected (mode {stat.filemode(st.st_mode)}), so its old version could not be "
                        f"deleted: make it writable (chmod u+w) to replace it")
            elif not any(path.iterdir()):
                return set()
            else:
                names = owned(path)
                if names is not None:
                    return names
                what = f"a directory this package did not write (it holds {_listing(path)})"
                if not os.path.samestat(st, os.lstat(path)):
                    continue  # swapped while we looked: look at the new one
        except FileNotFoundError:  # absent, or another saver is between its two renames
            return None
        raise CheckpointError(f"refusing to replace {path}: it is {what}; choose another path or remove it yourself")
    raise CheckpointError(f"could not replace {path}: other writers kept replacing it")


def _link_tree(src: Path, dst: Path) -> None:
    """Put ``src`` at ``dst`` without copying data where the filesystem allows (hard links)."""
    if src.is_dir() and not src.is_symlink():
        dst.mkdir()
        shutil.copystat(src, dst)
        for child in src.iterdir():
            _link_tree(child, dst / child.name)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # hard links refused (protected_hardlinks, some filesystems): copy
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry_foreign(path: Path, tmp: Path, owned: Owned) -> None:
    """Carry into the new version ``tmp`` every entry of the old version at ``path`` that its writer
    did not claim; refuse (naming them) where the new version writes a file of the same name."""
    try:
        names = check_replaceable(path, owned)
        foreign = sorted(set(os.listdir(path)) - (names or set())) if names is not None else []
    except (FileNotFoundError, NotADirectoryError):  # moved by another saver meanwhile: its swap's _rescue
        return  # carries them, as ours does for a version that arrives after this look

    clash = sorted(set(foreign) & set(os.listdir(tmp)))
    if clash:
        raise CheckpointError(f"refusing to replace {path}: it holds {clash}, which an earlier save did not write "
                              f"and this save would overwrite; move them out first")
    for name in foreign:
        try:
            _link_tree(path / name, tmp / name)
        except FileNotFoundError:
            pass  # the version moved on meanwhile: the swap's _rescue carries what is left


# ---------------------------------------------------------------------------------------------- swapping
NAME_MAX = 255  # bytes in one file name where the file system cannot say (ext4, xfs, btrfs, tmpfs, APFS)
SIBLING_TAIL = 18  # the most a sibling's name adds to its stem: "." + ".old-" + 12 hex digits


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):  # not there yet (then it holds no siblings), or no such query here
        return NAME_MAX


def sibling_stem(path: Path) -> str:
    """What the names of ``path``'s siblings (its temporaries and set-aside versions) are made from: ``path.name``,
    or, where that would push a sibling's name past the file system's limit, a prefix of it and a hash of the
    whole. So a save to any path whose own name is legal works; the stem is the same at every call, so clean-ups
    and loads find what an earlier save left."""
    raw = os.fsencode(path.name)
    limit = _name_max(path.parent) - SIBLING_TAIL
    if len(raw) <= limit:
        return path.name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return raw[:limit - len(digest) - 1].decode("utf-8", "ignore") + "~" + digest


def siblings(path: Path, kind: str) -> list[Path]:
    """Leftovers of interrupted saves of ``path`` (``new``: staging, ``tmp``: temporaries, ``old``:
    set-aside old versions, ``del``: versions being deleted), newest first."""
    found = [Path(p) for p in glob.glob(str(path.parent / f".{glob.escape(sibling_stem(path))}.{kind}-*"))]
    return sorted(found, key=_mtime, reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # deleted meanwhile by another save's clean-up
        return 0.0


_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the system cannot."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _delete(version: Path, path: Path) -> None:
    """Delete a set-aside version of ``path``: first renamed to a ``.del-`` name that nothing restores,
    so a half-deleted version can never be put back at ``path`` by a concurrent save's restore; if that
    save renamed it first, it is the live version now and is left alone."""
    tomb = path.parent / f".{sibling_stem(path)}.del-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(version, tomb)
    except OSError:
        return
    shutil.rmtree(tomb, ignore_errors=True)


def _rescue(old: Path, path: Path, owned: Owned) -> None:
    """After a swap: entries that arrived in the old version (now at ``old``) while the save ran, and
    that its writer did not claim, are moved into the new version rather than deleted with it."""
    try:
        left = set(os.listdir(old)) - (owned(old) or set()) - set(os.listdir(path))
    except OSError:
        return
    for name in sorted(left):
        try:
            os.rename(old / name, path / name)
        except OSError:
            pass


def _swap_in(tmp: Path, path: Path, owned: Owned) -> None:
    """Put the complete directory ``tmp`` at ``path``; what stood there ends at ``tmp`` or is deleted."""
    for _ in range(100):  # each pass either succeeds or saw another writer move things: try again
        if not os.path.lexists(path):
            try:
                os.rename(tmp, path)
                return
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue
        if check_replaceable(path, owned) is None:
            continue  # gone since the look above: another saver is between its renames
        try:
            exchanged = _exchange(tmp, path)
        except FileNotFoundError:
            continue
        if exchanged:
            if _is_empty_dir(tmp) or owned(tmp) is not None:
                _rescue(tmp, path, owned)
                return
            _exchange(tmp, path)  # something else arrived since the check: put it back
            check_replaceable(path, owned)
            continue
        held = _lock_version(path)
        if held is None:
            continue  # replaced or gone since the look above
        aside = path.with_name(f".{sibling_stem(path)}.old-{uuid.uuid4().hex[:12]}")
        try:
            os.rename(path, aside)
            os.rename(tmp, path)
        except OSError as e:
            os.close(held)
            if isinstance(e, FileNotFoundError) or e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
        _rescue(aside, path, owned)
        _delete(aside, path)
        os.close(held)  # held until here: set aside, the old version is the one loads find
        return
    raise CheckpointError(f"could not replace {path}: other writers kept replacing it")


def _lock_version(path: Path) -> int | None:
    """The version now at ``path``, locked, or None if it moved meanwhile. Between a save's two renames the old
    version is the only one there is: locked, no other saver's clean-up deletes it under a reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)  # held by a saver only while it swaps, never while it waits on another
    if _same_directory(fd, path):
        return fd
    os.close(fd)
    return None


def find_version(path: Path, is_version: Callable[[Path], bool]) -> Path | None:
    """Where the current version at ``path`` lies: ``path`` itself, or, when a save was killed between
    its two renames, the old version it had set aside; None when there is none."""
    if path.is_symlink():
        return None
    if is_version(path):
        return path
    if os.path.lexists(path):
        return None
    return next((p for p in siblings(path, "old") if is_version(p)), None)


def _restore_set_aside(path: Path, is_version: Callable[[Path], bool]) -> None:
    """A save killed between its two renames left no ``path``: put its old version back."""
    found = find_version(path, is_version)
    if found is not None and found != path:
        try:
            os.rename(found, path)
        except OSError:
            pass  # another process restored it first or is writing: either way there is a version


def _collect(path: Path) -> None:
    """Delete what interrupted saves of ``path`` left, except what a live writer holds (locked). A staging
    directory is still empty and unlocked for an instant after its save made it: removed then, that save
    makes another (``_locked_temporary``)."""
    stem = sibling_stem(path)
    for leftover in siblings(path, "tmp") + siblings(path, "old") + siblings(path, "new") + siblings(path, "del"):
        try:
            fd = os.open(leftover, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if leftover.name.startswith(f".{stem}.old-"):
                _delete(leftover, path)  # a restore may be taking it back at this moment
            elif leftover.name.startswith(f".{stem}.new-"):
                os.rmdir(leftover)  # empty, or it is not a staging directory of ours: then left alone
            else:
                shutil.rmtree(leftover, ignore_errors=True)
        except BlockingIOError:
            pass  # a writer is still filling it
        except OSError:
            pass  # not empty (rmdir): not ours to judge
        finally:
            os.close(fd)


def _locked_temporary(path: Path) -> tuple[Path, int]:
    """A fresh directory beside ``path``, locked before any clean-up can see it: made under a ``.new-``
    name, locked, then renamed ``.tmp-`` (the name clean-ups skip while it is locked). A clean-up that
    removed it in the instant before the lock makes us start again."""
    stem = sibling_stem(path)
    for _ in range(100):
        staging = Path(tempfile.mkdtemp(prefix=f".{stem}.new-", dir=path.parent))
        try:
            lock = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.chmod(lock, 0o777 & ~current_umask())  # mkdtemp makes 0700; the swapped-in version must read like any
            tmp = path.parent / f".{stem}.tmp-{staging.name[len(stem) + 6:]}"
            os.rename(staging, tmp)
            return tmp, lock
        except FileNotFoundError:
            os.close(lock)
            continue
        except BaseException:
            os.close(lock)
            shutil.rmtree(staging, ignore_errors=True)
            raise
    raise CheckpointError(f"could not make a temporary directory beside {path}: clean-ups kept removing it")


@contextmanager
def atomic_directory(path: str | os.PathLike, owned: Owned,
                     is_version: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``path`` only if the block succeeds.

    ``path`` may be absent, an empty directory or one ``owned`` recognises; anything else is
    refused before a byte is written. Entries of the old version that ``owned`` does not claim are
    carried into the new one. ``is_version``: what counts as a set-aside old version to restore
    (default: what ``owned`` recognises).
    """
    path = Path(path)
    is_version = is_version or (lambda p: p.is_dir() and owned(p) is not None)
    path.parent.mkdir(parents=True, exist_ok=True)
    _restore_set_aside(path, is_version)
    check_replaceable(path, owned)
    tmp, lock = _locked_temporary(path)
    try:
        yield tmp
        _carry_foreign(path, tmp, owned)
        os.fsync(lock)
        _swap_in(tmp, path, owned)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dir_fd)
        os.close(dir_fd)
    finally:
        os.close(lock)
        shutil.rmtree(tmp, ignore_errors=True)  # after a swap: the old version
    _collect(path)


# ---------------------------------------------------------------------------------------------- reading one version
def _same_directory(fd: int, where: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(where))
    except OSError:
        return False


def read_version(path: Path, read: Callable[[int, Path], T], is_version: Callable[[Path], bool],
                 missing: Callable[[Path], str], what: str = "checkpoint") -> T:
    """``read(dir_fd, where)`` on one version of the directory ``path`` (never a mix of two).

    A file a concurrent writer deleted under us (``FileNotFoundError``) means a newer version is in
    place: read that one. A file missing from a version that stays put is a ``CheckpointError``;
    so is no version at all (``missing(path)`` says why).
    """
    if path.is_symlink():
        raise CheckpointError(f"{path} is a symbolic link (to {os.readlink(path)}): a {what} is read only at its "
                              f"real path, never through a link; give the target instead")
    for _ in range(READ_ATTEMPTS):
        where = find_version(path, is_version)
        if where is None:
            if is_version(path):  # a writer's rename landed between find_version's two looks: read it
                continue
            raise CheckpointError(missing(path))
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            time.sleep(0.001)
            continue
        try:
            return read(fd, where)
        except FileNotFoundError as e:
            if where == path and _same_directory(fd, where):
                raise CheckpointError(getattr(e, "message", None) or f"missing file {e.filename}") from None
            time.sleep(0.001)  # this version was deleted under us: a newer one is in place
        finally:
            os.close(fd)
    raise CheckpointError(f"{path} kept changing while being read ({READ_ATTEMPTS} attempts): try again")
