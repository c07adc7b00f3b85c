"""The executable store (`compiling.compiled(store=...)`) is nobody else's way in:
a planted file is never unpickled nor used, a record renamed from another key is
rejected, a file or folder another user could write is refused, a symbolic link
is never followed (neither by a write nor by the clean-up), and what the store
makes is private whatever the umask. Tiny jitted programs: each compiles in
milliseconds."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import pytest

from codesign import compiling
from codesign import store as store_module
from codesign.cli import _cache_warnings_in_one_line

X = jnp.arange(4.0)
TIMES_3 = jax.jit(lambda x: jnp.sum(x * 3.0))  # 18.0 on X
TIMES_5 = jax.jit(lambda x: jnp.sum(x * 5.0))  # 30.0 on X


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test's programs compiled or read back afresh (no process-wide executables)."""
    monkeypatch.setattr(compiling, "_COMPILED", {})


def _stored(store, program=TIMES_3):
    """(the record's path, the answer) of `program` run through `store`."""
    out, _ = compiling.run(program, X, store=store)
    return store / f"{compiling.stored_key(program, (X,))}.exe", float(out)


def _compiles(monkeypatch) -> list:
    """A list that grows by one each time `compiling` compiles."""
    seen, real = [], compiling._compile
    monkeypatch.setattr(compiling, "_compile", lambda *a, **k: seen.append(1) or real(*a, **k))
    return seen


def _authenticates(path) -> bool:
    secret = (path.parent / store_module.SECRET_NAME).read_bytes()
    return store_module.opened(path.read_bytes(), secret, path.stem) is not None


class _Marker:
    """A pickle that, unpickled, makes the folder `path` (what a planted file would run)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("how", ["raw pickle", "forged record", "no secret yet"])
def test_a_planted_pickle_is_never_unpickled(tmp_path, monkeypatch, how):
    store, marker = tmp_path / "store", tmp_path / "ran"
    path, want = _stored(store)
    evil = pickle.dumps(_Marker(marker))
    if how == "forged record":  # the format and the key right, the secret guessed
        evil = store_module.record(b"\0" * 32, path.stem, evil)
    if how == "no secret yet":
        (store / store_module.SECRET_NAME).unlink()
    path.write_bytes(evil)
    monkeypatch.setattr(compiling, "_COMPILED", {})
    seen = _compiles(monkeypatch)
    assert _stored(store)[1] == want == 18.0
    assert not marker.exists() and seen == [1]  # compiled again, the planted code never ran
    assert _authenticates(path)  # and written over with the store's own record


def test_a_record_renamed_from_another_key_is_rejected(tmp_path, monkeypatch):
    """Another program's record under this program's name: its answer (30) is not
    returned; this program's (18) is, compiled again and stored in its place."""
    store = tmp_path / "store"
    three, _ = _stored(store, TIMES_3)
    five, _ = _stored(store, TIMES_5)
    three.write_bytes(five.read_bytes())
    monkeypatch.setattr(compiling, "_COMPILED", {})
    seen = _compiles(monkeypatch)
    assert _stored(store, TIMES_3)[1] == 18.0 and seen == [1]
    assert _authenticates(three) and three.read_bytes() != five.read_bytes()
    monkeypatch.setattr(compiling, "_COMPILED", {})
    assert _stored(store, TIMES_5)[1] == 30.0 and seen == [1]  # the other one read back


def test_a_record_others_may_write_is_not_read(tmp_path, monkeypatch):
    store = tmp_path / "store"
    path, _ = _stored(store)
    path.chmod(0o666)
    monkeypatch.setattr(compiling, "_COMPILED", {})
    seen = _compiles(monkeypatch)
    assert _stored(store)[1] == 18.0 and seen == [1]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # written over, private


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_record_is_neither_read_nor_replaced(tmp_path, monkeypatch):
    store = tmp_path / "store"
    path, _ = _stored(store)
    os.chown(path, 12345, -1)
    before = path.read_bytes()
    monkeypatch.setattr(compiling, "_COMPILED", {})
    seen = _compiles(monkeypatch)
    assert _stored(store)[1] == 18.0 and seen == [1]
    assert path.stat().st_uid == 12345 and path.read_bytes() == before  # left alone


def test_a_store_of_another_user_is_refused(tmp_path, monkeypatch):
    """The folder belongs to someone else (this test's user played by another uid):
    a StoreWarning naming it, the program compiled in memory, nothing read or written."""
    store = tmp_path / "store"
    path, _ = _stored(store)
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    monkeypatch.setattr(store_module, "_uid", lambda: os.getuid() + 12345)
    monkeypatch.setattr(compiling, "_COMPILED", {})
    seen = _compiles(monkeypatch)
    with pytest.warns(store_module.StoreWarning, match="belongs to uid"):
        assert _stored(store)[1] == 18.0
    assert seen == [1] and {p.name: p.read_bytes() for p in store.iterdir()} == before


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_store_others_may_write_into_is_refused(tmp_path, monkeypatch, mode):
    """World-writable (sticky or not), or writable by a group with other members."""
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(mode)
    monkeypatch.setattr(store_module, "_private_group", lambda gid: False)
    with pytest.warns(store_module.StoreWarning, match="writable by other users"):
        assert _stored(store)[1] == 18.0
    assert list(store.iterdir()) == []


def test_a_store_writable_by_the_users_own_group_is_used(tmp_path, monkeypatch):
    """A user-private group (a umask of 002 makes folders group-writable) is the user."""
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o775)
    monkeypatch.setattr(store_module, "_private_group", lambda gid: True)
    path, _ = _stored(store)
    assert _authenticates(path)


def test_a_store_below_a_folder_others_may_write_is_refused(tmp_path):
    """Whoever may rename entries of a folder above the store may swap the store."""
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.warns(store_module.StoreWarning, match="above"):
        assert _stored(tmp_path / "open" / "store")[1] == 18.0
    assert not (tmp_path / "open" / "store").exists() or not any(
        (tmp_path / "open" / "store").iterdir())


def test_a_symlinked_store_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    """The store a symbolic link to a user's folder of 100 `*.exe` files: refused,
    nothing written there, and none of the 100 deleted (the clean-up keeps at most
    `STORED_MAX` records, here 1)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    for i in range(100):
        (mine / f"{i:03d}.exe").write_text(f"the user's file {i}")
    before = {p.name: p.read_bytes() for p in mine.iterdir()}
    (tmp_path / "store").symlink_to(mine, target_is_directory=True)
    monkeypatch.setattr(store_module, "STORED_MAX", 1)
    with pytest.warns(store_module.StoreWarning, match="symbolic link"):
        assert _stored(tmp_path / "store")[1] == 18.0
        assert _stored(tmp_path / "store", TIMES_5)[1] == 30.0
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == before


def test_the_clean_up_removes_only_its_own_records(tmp_path, monkeypatch):
    """With files the store did not write beside its records (a user's `*.exe`, a
    symbolic link, a record of another secret), only its own oldest records go."""
    store = tmp_path / "store"
    first, _ = _stored(store, TIMES_3)
    (tmp_path / "victim.exe").write_text("elsewhere")
    (store / "link.exe").symlink_to(tmp_path / "victim.exe")
    (store / "user.exe").write_text("not a record")
    forged = store_module.record(b"\1" * 32, "0" * 64, b"payload")
    (store / f"{'0' * 64}.exe").write_bytes(forged)
    os.utime(first, (1, 1))  # the oldest
    monkeypatch.setattr(store_module, "STORED_MAX", 1)
    second, _ = _stored(store, TIMES_5)
    assert not first.exists() and second.exists()
    assert (store / "user.exe").read_text() == "not a record"
    assert (store / "link.exe").is_symlink()
    assert (tmp_path / "victim.exe").read_text() == "elsewhere"
    assert (store / f"{'0' * 64}.exe").read_bytes() == forged


def test_a_planted_symlink_never_redirects_a_write(tmp_path, monkeypatch):
    """Symbolic links planted at the record's name and at temporary names: the store
    writes through none of them (its temporaries are created exclusively, without
    following a link), and their target is untouched."""
    store = tmp_path / "store"
    path, _ = _stored(store)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path.unlink()
    path.symlink_to(victim)
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        (store / f"{path.stem}.{pid}.tmp").symlink_to(victim)
    monkeypatch.setattr(compiling, "_COMPILED", {})
    assert _stored(store)[1] == 18.0
    assert victim.read_text() == "precious"
    assert not path.is_symlink() and _authenticates(path)  # the link replaced, not followed
    fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):  # exclusive: neither a link nor a file reused
            store_module._write_new(fd, f"{path.stem}.{os.getpid()}.tmp", b"x")
    finally:
        os.close(fd)
    assert victim.read_text() == "precious"


def test_what_the_store_makes_is_private_under_umask_000(tmp_path):
    old = os.umask(0)
    try:
        path, _ = _stored(tmp_path / "a" / "b" / "store")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in path.parent.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


def test_the_cache_folder_is_checked(tmp_path, monkeypatch):
    """`cache_folder_problem` (what `codesign` checks CODESIGN_CACHE with): a new
    folder is made 0700 and used; a symbolic link, a folder others may write (even
    sticky: JAX's entries go straight into it), another user's, one others may
    reach under a umask letting them write what JAX keeps: refused, by path."""
    new = tmp_path / "new" / "xla"
    assert store_module.cache_folder_problem(new) is None
    assert stat.S_IMODE(new.stat().st_mode) == 0o700 and list(new.iterdir()) == []
    (tmp_path / "link").symlink_to(new, target_is_directory=True)
    assert "symbolic link" in store_module.cache_folder_problem(tmp_path / "link")
    (tmp_path / "shared").mkdir(mode=0o755)
    (tmp_path / "shared").chmod(0o1777)
    assert "writable by other users" in store_module.cache_folder_problem(tmp_path / "shared")
    (tmp_path / "shared").chmod(0o755)
    assert store_module.cache_folder_problem(tmp_path / "shared") is None
    monkeypatch.setattr(store_module, "_umask", lambda: 0)
    assert "umask" in store_module.cache_folder_problem(tmp_path / "shared")
    assert store_module.cache_folder_problem(new) is None  # 0700: nobody else reaches it
    monkeypatch.setattr(store_module, "_uid", lambda: os.getuid() + 12345)
    assert "belongs to uid" in store_module.cache_folder_problem(new)


def test_cache_warnings_are_one_line_naming_codesign_cache(monkeypatch, capsys):
    """JAX's persistent-cache warnings (one per program on a full disk) and the
    store's: one line naming CODESIGN_CACHE and the folder, once; others as usual."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    _cache_warnings_in_one_line("traffic", "/other/cache")
    hook = warnings.showwarning
    _cache_warnings_in_one_line("estimate", "/some/cache")  # a second command in the process
    assert warnings.showwarning is hook  # installed once, not wrapped again
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        for name in ("jit_a", "jit_b"):
            warnings.warn(f"Error writing persistent compilation cache entry for '{name}': "
                          "OSError: [Errno 28] No space left on device", stacklevel=1)
        warnings.warn(store_module.StoreWarning("the executable store: cannot be written"),
                      stacklevel=1)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["codesign estimate: warning: CODESIGN_CACHE '/some/cache': cannot be "
                     "written (OSError: [Errno 28] No space left on device); compiled "
                     "programs are not kept"]
    _cache_warnings_in_one_line("traffic", "/some/cache")  # the next command: its own line
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("Error reading persistent compilation cache entry for 'jit_a': error: "
                      "Error -5 while decompressing data", stacklevel=1)
    assert capsys.readouterr().err.splitlines() == [
        "codesign traffic: warning: CODESIGN_CACHE '/some/cache': holds an entry JAX cannot "
        "read (error: Error -5 while decompressing data); compiled again (remove the folder "
        "to rebuild it)"]


def test_the_command_uses_no_cache_others_may_write(tmp_path):
    """`codesign` with CODESIGN_CACHE a folder anyone may write: one warning line
    naming it, exit 0, and nothing written there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = subprocess.run([sys.executable, "-m", "codesign", "presets"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "CODESIGN_CACHE": str(shared)})
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        f"codesign presets: warning: CODESIGN_CACHE not used: {str(shared)!r} is writable by "
        "other users (mode 0777); compiling in memory (set CODESIGN_CACHE to a private "
        "folder of yours, or empty)"]
    assert list(shared.iterdir()) == []
