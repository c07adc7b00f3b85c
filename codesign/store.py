"""The store of compiled executables (`compiling.compiled(store=...)`): records
on disk that a later process reads back instead of tracing and compiling, in a
folder only this user can have written, each authenticated before use (the
comment below). `cache_folder_problem` checks a cache folder for the command
line; `StoreWarning` is what a store that cannot be used says.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import warnings
from pathlib import Path

import jax

STORED_MAX = 64  # executables kept in a store; the least recently written go first


# ------------------------------------------------------------ the store's safety
# A stored executable is machine code, and its record is unpickled: a file
# another user could have written or replaced must never be read, and a record
# must prove it is the one asked for before it is used. So the store is a folder
# of this user's own (0700, every file 0600, whatever the umask), checked before
# each use (`_open_private`: not a symbolic link, owned by this user, nobody
# else may write into it or into a folder above it that could swap it), and
# every record carries its full key and a format version, authenticated with an
# HMAC-SHA256 under a secret key file of the store (`SECRET_NAME`, 0600): a
# record written by anyone without the secret, or another key's record renamed,
# is rejected on its raw bytes before anything is unpickled, then compiled again
# and written over. Every file is opened relative to the checked folder's file
# descriptor, without following symbolic links, and written to a temporary file
# created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW) then renamed; the clean-up
# deletes only regular files of this user whose record's header authenticates.
RECORD_MAGIC = b"codesign-exe/v2\n"  # the record format; another version is not read
SECRET_NAME = "hmac.key"  # the store's secret (32 random bytes, 0600)
_SECRET_BYTES = 32
_KEY_CHARS = 64  # stored_key: sha256, hex
_TAG_BYTES = 32  # HMAC-SHA256
_HEAD_BYTES = len(RECORD_MAGIC) + _KEY_CHARS + 2 * _TAG_BYTES  # magic, key, head tag, body tag
# POSIX: where a folder cannot be opened without following links, or has no owner
# to check (Windows), nothing is stored or cached (`_open_private` refuses)
_CHECKABLE = all(hasattr(os, n) for n in ("O_NOFOLLOW", "O_DIRECTORY", "getuid"))
_NOFOLLOW, _CLOEXEC = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC


class StoreWarning(UserWarning):
    """The executable store was not used (a folder another user could write, one
    that cannot be written, a full disk): the program was compiled in memory."""


class UnsafeFolder(ValueError):
    """A folder (or a file in it) another user could have written or swapped."""


def _uid() -> int:
    """The user every stored file must belong to (a function: tests stand in another)."""
    return os.getuid()


def _private_group(gid: int) -> bool:
    """Whether `gid` is this user's own group (named as the user, nobody else in
    it: a user-private group, where a umask of 002 makes folders group-writable)."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(_uid()).pw_name
        group = grp.getgrgid(gid)
    except (KeyError, OSError):
        return False
    return gid == os.getgid() and group.gr_name == user and set(group.gr_mem) <= {user}


def writable_by_others(st: os.stat_result) -> bool:
    """Whether users other than the owner may create, rename or delete entries in
    a folder of status `st` (a sticky folder lets them add names of their own)."""
    return bool(st.st_mode & 0o002 or (st.st_mode & 0o020 and not _private_group(st.st_gid)))


def folder_problem(st: os.stat_result, path) -> str | None:
    """Why a folder of status `st` (not followed) is not this user's private
    folder, or None: a symbolic link, not a folder, owned by another user, or
    writable by others."""
    if stat.S_ISLNK(st.st_mode):
        return f"{str(path)!r} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{str(path)!r} is not a folder"
    if st.st_uid != _uid():
        return f"{str(path)!r} belongs to uid {st.st_uid}, not to this user (uid {_uid()})"
    if writable_by_others(st):
        return f"{str(path)!r} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def ancestors_problem(path) -> str | None:
    """Why a folder above `path` (symbolic links resolved) would let another user
    swap what is below it, or None: each must belong to this user or root and be
    writable by nobody else unless sticky (/tmp)."""
    real = Path(os.path.realpath(path))
    for p in (real, *real.parents):
        try:
            st = os.stat(p)
        except OSError:
            continue  # not there (yet): made below, by this user
        if st.st_uid not in (0, _uid()):
            return f"{str(p)!r}, above {str(path)!r}, belongs to uid {st.st_uid}"
        if writable_by_others(st) and not st.st_mode & stat.S_ISVTX:
            return (f"{str(p)!r}, above {str(path)!r}, is writable by other users "
                    f"(mode {stat.S_IMODE(st.st_mode):04o})")
    return None


def _make_private(folder: str) -> bool:
    """`folder` and the folders above it that are absent made 0700 (never more
    open, whatever the umask); whether `folder` itself was made."""
    missing = []
    p = folder
    while not os.path.lexists(p) and p != os.path.dirname(p):
        missing.append(p)
        p = os.path.dirname(p)
    for q in reversed(missing):
        try:
            os.mkdir(q, 0o700)
        except FileExistsError:
            if q == folder:
                return False
    return bool(missing)


def _umask() -> int:
    """This process's umask (read from /proc on Linux; else set and restored)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def cache_folder_problem(path) -> str | None:
    """Why the folder `path` (`codesign`'s CODESIGN_CACHE: JAX's persistent
    compilation cache and the executable store's parent) is not one to compile
    into, or None. Made 0700 (with the folders above it that are absent) when
    absent; then refused when it is a symbolic link, another user's, writable by
    others or below a folder that would let them swap it (`_open_private`);
    when the umask lets others write the files JAX keeps there (JAX takes the
    umask) and they can reach it; or when a file cannot be written in it
    (read-only, full)."""
    path = os.path.abspath(path)
    try:
        fd = _open_private(path, create=True)
    except UnsafeFolder as e:
        return str(e)
    except OSError as e:
        return f"{path!r} cannot be made ({e.strerror or e})"
    try:
        mode, gid = stat.S_IMODE(os.fstat(fd).st_mode), os.fstat(fd).st_gid
        mask = _umask()
        if ((mode & 0o001 and not mask & 0o002)
                or (mode & 0o010 and not mask & 0o020 and not _private_group(gid))):
            return (f"{path!r} is open to other users (mode {mode:04o}) and the umask "
                    f"({mask:03o}) lets them rewrite what JAX keeps there (chmod 700 it)")
        probe = _temporary("probe")
        _write_new(fd, probe, b"\0")
        os.unlink(probe, dir_fd=fd)
    except OSError as e:
        return f"{path!r} cannot be written ({e.strerror or e})"
    finally:
        os.close(fd)
    return None


def _open_private(folder, create: bool) -> int | None:
    """A file descriptor of `folder`, checked private (`folder_problem`,
    `ancestors_problem`) on the descriptor itself, not followed if a symbolic
    link; made 0700 when `create` and absent; None when absent and not `create`.
    Raises UnsafeFolder naming the folder and why."""
    folder = os.path.abspath(folder)
    if not _CHECKABLE:
        raise UnsafeFolder(f"{folder!r}: this platform cannot check that a folder is private")
    made = False
    if create:
        made = _make_private(folder)
    problem = ancestors_problem(os.path.dirname(folder))
    if problem:
        raise UnsafeFolder(problem)
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError:  # ELOOP, ENOTDIR: a symbolic link or a file in its place
        raise UnsafeFolder(folder_problem(os.lstat(folder), folder)
                           or f"{folder!r} cannot be opened as a folder") from None
    try:
        if made:
            os.fchmod(fd, 0o700)  # exactly, whatever the umask
        problem = folder_problem(os.fstat(fd), folder)
        if problem:
            raise UnsafeFolder(problem)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _own_file(fd: int, name: str, private: bool = False) -> int | None:
    """A descriptor of the regular file `name` in the folder `fd`, not followed if a
    symbolic link, if it belongs to this user and nobody else may write it (nor
    read it, if `private`); None if absent, or not such a file."""
    try:
        f = os.open(name, _READ_FLAGS, dir_fd=fd)
    except OSError:  # absent, a symbolic link (ELOOP), unreadable
        return None
    st = os.fstat(f)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != _uid()
            or st.st_mode & (0o077 if private else 0o022)):
        os.close(f)
        return None
    return f


def _read_all(f: int, limit: int | None = None) -> bytes:
    with os.fdopen(f, "rb") as file:
        return file.read() if limit is None else file.read(limit)


def _write_new(fd: int, name: str, data: bytes) -> None:
    """`data` in the new file `name` of the folder `fd`, created exclusively (never
    through a file or symbolic link already there) and 0600 whatever the umask."""
    f = os.open(name, _NEW_FLAGS, 0o600, dir_fd=fd)
    try:
        os.fchmod(f, 0o600)
        with os.fdopen(f, "wb", closefd=False) as file:
            file.write(data)
    finally:
        os.close(f)


def _temporary(key: str) -> str:
    return f"{key}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _secret(fd: int, create: bool) -> bytes | None:
    """The store's secret (`SECRET_NAME` in the folder `fd`): 32 bytes in a 0600 file
    of this user's, made (exclusively, whole: written aside, then linked) when
    `create` and absent; None when absent. Raises UnsafeFolder when the file is
    there but not this user's private file of 32 bytes."""
    for _ in range(2):
        f = _own_file(fd, SECRET_NAME, private=True)
        if f is not None:
            secret = _read_all(f, _SECRET_BYTES + 1)
            if len(secret) == _SECRET_BYTES:
                return secret
        try:
            os.lstat(SECRET_NAME, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                return None
            tmp = _temporary("secret")
            _write_new(fd, tmp, secrets.token_bytes(_SECRET_BYTES))
            try:  # atomic and exclusive: another process's secret, if first, wins
                os.link(tmp, SECRET_NAME, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp, dir_fd=fd)
            continue
        break
    raise UnsafeFolder(f"its secret key file {SECRET_NAME!r} is not a private file "
                       f"(0600, {_SECRET_BYTES} bytes) of this user's")


def _tags(secret: bytes, key: str, payload) -> tuple[bytes, bytes]:
    """The record's two HMACs: of its header (format and key: the clean-up's proof
    that the store wrote the file) and of the whole record (the loader's)."""
    head = RECORD_MAGIC + key.encode()
    body = hmac.new(secret, b"body\0" + head, hashlib.sha256)
    body.update(payload)
    return hmac.new(secret, b"head\0" + head, hashlib.sha256).digest(), body.digest()


def record(secret: bytes, key: str, payload: bytes) -> bytes:
    """A stored record: the format, the full key, the HMACs (`_tags`), the payload."""
    head_tag, body_tag = _tags(secret, key, payload)
    return RECORD_MAGIC + key.encode() + head_tag + body_tag + payload


def _header_ok(data: bytes, secret: bytes, key: str) -> bool:
    """Whether `data` starts with the header of a record written for `key` under `secret`."""
    head = RECORD_MAGIC + key.encode()
    if len(data) < _HEAD_BYTES or not hmac.compare_digest(data[:len(head)], head):
        return False
    want = hmac.new(secret, b"head\0" + head, hashlib.sha256).digest()
    return hmac.compare_digest(data[len(head):len(head) + _TAG_BYTES], want)


def opened(data: bytes, secret: bytes, key: str) -> memoryview | None:
    """The payload of the record `data` if it is this format's, written for `key` and
    authenticated under `secret` (checked on the raw bytes: nothing is unpickled
    before), else None."""
    if not _header_ok(data, secret, key):
        return None
    payload = memoryview(data)[_HEAD_BYTES:]  # not copied
    _, body_tag = _tags(secret, key, payload)
    return payload if hmac.compare_digest(data[_HEAD_BYTES - _TAG_BYTES:_HEAD_BYTES],
                                          body_tag) else None


def _warn(folder, why: str) -> None:
    warnings.warn(StoreWarning(f"the executable store {str(folder)!r}: {why}"), stacklevel=3)


def _store(folder, create: bool) -> int | None:
    """`_open_private(folder, create)`, or None with a StoreWarning saying why not."""
    try:
        return _open_private(folder, create)
    except UnsafeFolder as e:
        _warn(folder, f"not used: {e}")
    except OSError as e:
        _warn(folder, f"cannot be written: {e.strerror or e}")
    return None


def save_record(path: Path, exe) -> None:
    """Best effort (a StoreWarning, not an error, when the folder is unsafe,
    read-only or full): the serialized executable, its output's structure (a
    pytree of zeros: JAX's tree definitions of equinox modules do not survive
    pickling themselves) and the devices it runs on, as a `record` for the key
    `path.stem`, written aside and renamed over `path` (a file there that is not
    this user's is left alone, and nothing is stored); then the oldest records
    beyond `STORED_MAX` removed (`_prune`)."""
    from jax.experimental import serialize_executable

    try:
        blob, _, out_tree = serialize_executable.serialize(exe)
        example = jax.tree.unflatten(out_tree, [0] * out_tree.num_leaves)
        devices = sorted({d.id for s in jax.tree.leaves(exe.input_shardings)
                          for d in s.device_set})
        payload = pickle.dumps((blob, example, devices), protocol=4)
    except Exception:  # noqa: BLE001 - not serializable: kept in this process only
        return
    fd = _store(path.parent, create=True)
    if fd is None:
        return
    tmp = None
    try:
        secret = _secret(fd, create=True)
        try:
            if os.lstat(path.name, dir_fd=fd).st_uid != _uid():
                return  # not ours to replace
        except FileNotFoundError:
            pass
        tmp = _temporary(path.stem)
        _write_new(fd, tmp, record(secret, path.stem, payload))
        os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)  # a reader sees all or none
        tmp = None
        _prune(fd, secret)
    except UnsafeFolder as e:
        _warn(path.parent, f"not used: {e}")
    except OSError as e:
        _warn(path.parent, f"cannot be written: {e.strerror or e}")
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
        os.close(fd)


def _prune(fd: int, secret: bytes) -> None:
    """The oldest records beyond `STORED_MAX` removed from the folder `fd`: only
    regular files of this user's whose header authenticates (`_header_ok`), by
    name in that folder (nothing followed, nothing outside it)."""
    with os.scandir(fd) as entries:
        names = [e.name for e in entries if e.name.endswith(".exe")]
    if len(names) <= STORED_MAX:
        return
    ours = []
    for name in names:
        f = _own_file(fd, name)
        if f is None:
            continue
        mtime_ns = os.fstat(f).st_mtime_ns
        if _header_ok(_read_all(f, _HEAD_BYTES), secret, name[:-len(".exe")]):
            ours.append((mtime_ns, name))
    for _, name in sorted(ours)[:max(len(ours) - STORED_MAX, 0)]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)


def load_record(path: Path, args, prove: bool = True):
    """The executable stored at `path` for `args`, run once on them (a few
    milliseconds) to prove it whole unless `prove` is False (`run` proves it by
    its own first run), or None (absent; not a private file of this user's in a
    private folder; not a record of this format written for this key under the
    store's secret; unreadable, from another build, or failing: compiled again).
    Nothing is unpickled before the record authenticates (`opened`)."""
    from jax.experimental import serialize_executable

    fd = _store(path.parent, create=False)
    if fd is None:
        return None
    try:
        secret = _secret(fd, create=False)
        f = _own_file(fd, path.name) if secret is not None else None
        payload = opened(_read_all(f), secret, path.stem) if f is not None else None
    except (UnsafeFolder, OSError) as e:
        _warn(path.parent, f"not used: {e}")
        payload = None
    finally:
        os.close(fd)
    if payload is None:
        return None
    try:
        blob, example, devices = pickle.loads(payload)  # authenticated: the store's own
        by_id = {d.id: d for d in jax.devices()}
        exe = serialize_executable.deserialize_and_load(
            blob, jax.tree.structure((args, {})), jax.tree.structure(example),
            execution_devices=[by_id[i] for i in devices])
        if prove:
            jax.block_until_ready(exe(*args))
        return exe
    except Exception:  # noqa: BLE001
        return None
