"""The directory transaction: a reader sees one whole version. A save swaps a locked temporary in by one
``renameat2(RENAME_EXCHANGE)`` (else sets the old version aside, where loads find it after a kill)."""

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
    """An error if its version stays put, a retry if replaced."""

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
    """Names ``owned`` claims at ``path`` (None: absent); anything else is refused."""
    for _ in range(100):
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                what = f"a symbolic link (to {os.readlink(path)})"
            elif not stat.S_ISDIR(st.st_mode):
                what = "a file"
            elif not st.st_mode & stat.S_IWUSR:
                what = f"write-protected (mode {stat.filemode(st.st_mode)})"
            elif not any(path.iterdir()):
                return set()
            else:
                names = owned(path)
                if names is not None:
                    return names
                what = f"not ours (holding {_listing(path)})"
                if not os.path.samestat(st, os.lstat(path)):
                    continue  # swapped while we looked: look at the new one
        except FileNotFoundError:  # absent, or another saver is between its two renames
            return None
        raise CheckpointError(f"refusing to replace {path}: it is {what}")
    raise CheckpointError(f"could not replace {path}: it kept changing")


def _link_tree(src: Path, dst: Path) -> None:
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
    try:
        names = check_replaceable(path, owned)
        foreign = sorted(set(os.listdir(path)) - (names or set())) if names is not None else []
    except (FileNotFoundError, NotADirectoryError):  # moved by another saver meanwhile: its swap's _rescue
        return  # carries them, as ours does for a version that arrives after this look

    clash = sorted(set(foreign) & set(os.listdir(tmp)))
    if clash:
        raise CheckpointError(f"refusing to replace {path}: it would overwrite {clash}")
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
    """``path.name``, hashed short where a sibling's name would pass the limit."""
    raw = os.fsencode(path.name)
    limit = _name_max(path.parent) - SIBLING_TAIL
    if len(raw) <= limit:
        return path.name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return raw[:limit - len(digest) - 1].decode("utf-8", "ignore") + "~" + digest


def siblings(path: Path, kind: str) -> list[Path]:
    """Leftovers of interrupted saves, newest first."""
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
    """Atomic swap (Linux ``renameat2``); False where unsupported."""
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
    """Via a ``.del-`` name, so no restore puts it back half-deleted."""
    tomb = path.parent / f".{sibling_stem(path)}.del-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(version, tomb)
    except OSError:
        return
    shutil.rmtree(tomb, ignore_errors=True)


def _rescue(old: Path, path: Path, owned: Owned) -> None:
    """Move entries that arrived in ``old`` during the save into ``path``."""
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
    """Put ``tmp`` at ``path``; the old version ends at ``tmp`` or is deleted."""
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
    raise CheckpointError(f"could not replace {path}: it kept changing")


def _lock_version(path: Path) -> int | None:
    """Locked while a save renames it; None if it moved."""
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
    """``path``, or the old version a killed save set aside."""
    if path.is_symlink():
        return None
    if is_version(path):
        return path
    if os.path.lexists(path):
        return None
    return next((p for p in siblings(path, "old") if is_version(p)), None)


def _restore_set_aside(path: Path, is_version: Callable[[Path], bool]) -> None:
    found = find_version(path, is_version)
    if found is not None and found != path:
        try:
            os.rename(found, path)
        except OSError:
            pass  # another process restored it first or is writing: either way there is a version


def _collect(path: Path) -> None:
    """Delete leftovers no live writer holds."""
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
    """Locked before it takes the ``.tmp-`` name clean-ups look for."""
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
    raise CheckpointError(f"could not make a temporary beside {path}")


@contextmanager
def atomic_directory(path: str | os.PathLike, owned: Owned,
                     is_version: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A temporary directory that replaces ``path`` (absent, empty or ``owned``) if the block succeeds."""
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
    """``read(dir_fd, where)`` on one version, retried on a newer one if a file vanishes."""
    if path.is_symlink():
        raise CheckpointError(f"{path} is a symbolic link (to {os.readlink(path)}): a {what} is read at its real path")
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
    raise CheckpointError(f"{path} kept changing while being read ({READ_ATTEMPTS} attempts)")
