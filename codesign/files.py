"""Reading an input file the user named: one helper, with a size cap, whose
errors are one line naming the file (a directory, a device or pipe that never
ends, a file too big, one that cannot be read); and parsers of its text (JSON,
TOML, YAML) with caps on what a hostile file can make them do (nest past
Python's stack, expand aliases without end, hold a number Python will not show),
whose errors are one line naming the file too; the TOML text the commands
write (`toml_text`, by tomli-w); and the one writer of every file codesign
writes (`write_file`, `write_figure`: atomic, never through a link, `-` for
standard output) with the check a command makes of its outputs before any work
(`check_outputs`: none an input or another output, by path and by inode)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import stat
import tomllib
from pathlib import Path

from .units import format_bytes

TOML_LIMIT_BYTES = 16 * 2**20  # scenarios, systems, sweep specs: a few KiB each
LOG_LIMIT_BYTES = 1024 * 2**20  # bench output and nccl-tests logs


def read_bytes(path: str | Path, what: str, limit: int = TOML_LIMIT_BYTES) -> bytes:
    """The bytes of the file `path` (`what` names it: "scenario file"), at most
    `limit` of them; anything else is a one-line error naming `what` and the path:
    FileNotFoundError when it does not exist, ValueError when it is a directory,
    cannot be read or holds more than `limit` bytes (a stream such as /dev/zero is
    read up to the cap, so a pipe of a small file still works)."""
    name = f"{what} {str(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} does not exist") from None
    except OSError as e:
        raise ValueError(f"{name} cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{name} is a directory; name a file")
    fifo = stat.S_ISFIFO(mode)
    try:
        # a named pipe is opened without waiting for a writer (none: it reads as empty
        # at once instead of blocking forever), then read as any file
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if fifo else 0))
        if fifo:
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"{name} cannot be read: {e.strerror or e}") from None
    if len(data) > limit:
        kind = "is larger" if stat.S_ISREG(mode) else "is not a regular file and gives more"
        raise ValueError(f"{name} {kind} than {format_bytes(limit)}; is it the right file?")
    return data


def read_text(path: str | Path, what: str, limit: int = TOML_LIMIT_BYTES) -> str:
    """`read_bytes` decoded as UTF-8, less a byte-order mark at the start (editors on
    Windows write one; no reader wants it as the first character of a key); bytes
    that are not UTF-8 are a ValueError naming the file, the line and the byte."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (line {line}, byte {e.start}: "
                         f"{e.reason}); is it the right file?") from None


# ----------------------------------------------------------------- parsing
# Parsers of the text of a file the user named (JSON, TOML, YAML) whose every
# failure is one ValueError naming the file (`name`, as the caller's messages
# do): nesting past MAX_DEPTH (the parsers recurse: past Python's stack they raise
# RecursionError), an integer too long for Python to show (its int<->str limit
# would advise a Python call), YAML aliases that expand past MAX_ALIAS_VALUES.
MAX_DEPTH = 32  # levels of tables / lists in any file a user names (scenario.MAX_TOML_DEPTH)
MAX_DIGITS = 1000  # an integer longer than this is no configuration's (Python shows <= 4300)
MAX_ALIAS_VALUES = 100_000  # values YAML aliases may repeat, over the whole file
_HUGE = 10**MAX_DIGITS
_DIGITS = re.compile(r"[0-9][0-9_]*")  # a run of digits (TOML and YAML allow 1_000)
_KEY_BEFORE = re.compile(r"""([\w.\-]+)["']?\s*[:=]""")
KEY_CHARS = 200  # of the text before a number, searched for its key
KEY_SHOWN = 40  # of a key, in a message


def _too_deep(name: str, at: str = "") -> ValueError:
    return ValueError(f"{name}{': ' + at if at else ''} nests tables or arrays more than "
                      f"{MAX_DEPTH} levels deep; is it the right file?")


def _too_long(name: str, at: str) -> ValueError:
    return ValueError(f"{name}: {at} holds an integer of more than {MAX_DIGITS} digits; "
                      "is it the right file?")


def _long_number(text: str) -> re.Match | None:
    """The first run of more than MAX_DIGITS digits in `text` (each run is scanned
    once: a pattern asking for 1000 digits would rescan every shorter run from each
    of its digits)."""
    return next((m for m in _DIGITS.finditer(text)
                 if len(m.group()) - m.group().count("_") > MAX_DIGITS), None)


def _key(key) -> str:
    """A key as a message shows it: cut to KEY_SHOWN characters (a hostile file's
    key may be megabytes long)."""
    text = str(key)
    return text if len(text) <= KEY_SHOWN else f"{text[:KEY_SHOWN]}..."


def _path(link) -> str:
    """The dotted key (list items as [i], past two in a row as [...]) of a (key,
    parent) link of `_problem`'s walk."""
    parts: list = []
    while link is not None:
        key, link = link
        parts.append(key if isinstance(key, int) else _key(key))
    shown, run = [], 0
    for key in reversed(parts):
        run = run + 1 if isinstance(key, int) else 0
        if run <= 2:
            shown.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        elif run == 3:
            shown.append("[...]")
    return "".join(shown).lstrip(".")


def _problem(tree) -> tuple[str, object] | None:
    """("deep" or "long", the link of its key) of the first table or list nested
    past MAX_DEPTH, or integer of more than MAX_DIGITS digits, in a parsed tree;
    None when there is none. Iterative, and no deeper than the cap."""
    todo = [(tree, 0, None)]
    while todo:
        value, depth, link = todo.pop()
        if isinstance(value, (dict, list, tuple, set, frozenset)):  # YAML: !!omap, !!set
            if depth >= MAX_DEPTH:
                return "deep", link
            items = value.items() if isinstance(value, dict) else enumerate(value)
            todo.extend((v, depth + 1, (k, link)) for k, v in reversed(list(items)))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _HUGE:
            return "long", link
    return None


def checked(tree, name: str):
    """`tree` (a parsed JSON / TOML / YAML value), if it nests at most MAX_DEPTH
    levels and holds no integer of more than MAX_DIGITS digits; else a ValueError
    naming the file and the key."""
    problem = _problem(tree)
    if problem is None:
        return tree
    kind, link = problem
    raise (_too_deep(name, _path(link)) if kind == "deep" else _too_long(name, _path(link)))


def _unreadable(text: str, name: str, error: ValueError, form: str) -> ValueError:
    """What a parser's own ValueError (not its syntax error) means, in one line: an
    integer past Python's int<->str limit (the key on its line named), or else the
    parser's words."""
    m = _long_number(text)
    if m is None:
        words = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return ValueError(f"{name} is not valid {form} ({words})")
    line = text.count("\n", 0, m.start()) + 1
    start = max(text.rfind("\n", 0, m.start()) + 1, m.start() - KEY_CHARS)
    keys = _KEY_BEFORE.findall(text, start, m.start())
    return _too_long(name, f"{_key(keys[-1])} (line {line})" if keys else f"line {line}")


def parse_json(text: str, name: str):
    """The value of a JSON text, `checked`; invalid JSON, nesting past MAX_DEPTH or
    an integer too long is a one-line ValueError naming `name` (the file)."""
    try:
        tree = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:  # nested past Python's stack: past the cap too
        raise _too_deep(name) from None
    except ValueError as e:
        raise _unreadable(text, name, e, "JSON") from None
    return checked(tree, name)


def parse_toml(text: str, name: str) -> dict:
    """The tables of a TOML text, `checked` (as `parse_json`)."""
    try:
        tree = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{name} is not valid TOML: {e}") from None
    except RecursionError:
        raise _too_deep(name) from None
    except ValueError as e:
        raise _unreadable(text, name, e, "TOML") from None
    return checked(tree, name)


class _Refused(Exception):
    """A YAML document refused before it is built; its text follows the file's name."""


@functools.cache
def _yaml_loader():
    """PyYAML's SafeLoader (as `yaml.safe_load`) that refuses, while composing, nodes
    nested past MAX_DEPTH + 1 (its composer recurses: the stack would run out)."""
    import yaml

    class Loader(yaml.SafeLoader):
        nesting = 0

        def compose_node(self, parent, index):
            self.nesting += 1
            try:
                if self.nesting > MAX_DEPTH + 1:
                    line = self.peek_event().start_mark.line + 1
                    raise _Refused(f" (line {line}) nests tables or arrays more than "
                                   f"{MAX_DEPTH} levels deep; is it the right file?")
                return super().compose_node(parent, index)
            finally:
                self.nesting -= 1

    return Loader


def _yaml_problem(node) -> str | None:
    """What is wrong with a composed YAML document, in words that follow the file's
    name, or None: a node nested past MAX_DEPTH, or aliases that would repeat more
    than MAX_ALIAS_VALUES values (a "billion laughs": anchors of lists of aliases of
    anchors, a few hundred bytes that expand to 9^9 values; an alias of the list that
    holds it, which never ends). The nodes are walked as built (aliases expanded),
    iteratively, counting each node met again."""
    import yaml

    seen, repeated, todo = set(), 0, [(node, 1, None)]
    while todo:
        node, depth, link = todo.pop()
        if id(node) in seen:
            repeated += 1
            if repeated > MAX_ALIAS_VALUES:
                at = _path(link) or "the top level"
                return (f": {at} uses YAML aliases (&/*) that repeat more than "
                        f"{MAX_ALIAS_VALUES} values, which codesign does not expand")
        seen.add(id(node))
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) and depth > MAX_DEPTH:
            at = f": {_path(link)}" if link is not None else ""
            return f"{at} nests tables or arrays more than {MAX_DEPTH} levels deep; is it " \
                "the right file?"
        if isinstance(node, yaml.SequenceNode):
            todo.extend((v, depth + 1, (i, link)) for i, v in reversed(
                list(enumerate(node.value))))
        elif isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                todo += [(value, depth + 1, (name, link)), (key, depth + 1, link)]
    return None


def parse_yaml(text: str, name: str):
    """The value of a YAML text (PyYAML's safe loader, which flax, a dependency of
    codesign, installs), `checked`; invalid YAML, nesting past MAX_DEPTH, aliases
    that repeat too much (`_yaml_problem`) or an integer too long is a one-line
    ValueError naming `name` (the file)."""
    import yaml

    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        problem = None if node is None else _yaml_problem(node)
        if problem is not None:
            raise _Refused(problem)
        tree = None if node is None else loader.construct_document(node)
    except _Refused as e:
        raise ValueError(f"{name}{e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}: {getattr(e, 'problem', '')})" if mark else ""
        raise ValueError(f"{name} is not valid YAML{at}") from None
    except RecursionError:
        raise _too_deep(name) from None
    except ValueError as e:  # a constructor's: an integer past Python's limit, a bad date
        raise _unreadable(text, name, e, "YAML") from None
    finally:
        loader.dispose()
    return checked(tree, name)


def toml_text(tables: dict, comments=()) -> str:
    """The TOML text of `tables` ({table: {key: value}}; empty tables left out),
    written by tomli-w (every string quoted and escaped as TOML needs), after
    `comments` (one `# ` line each). A float that is a whole number is written
    as an integer (48, not 48.0), as a person writes a layer count; a value that
    is none of bool, number or string is written as its text."""
    import tomli_w

    def plain(v):
        if isinstance(v, (int, str)):  # bool too
            return v
        if isinstance(v, float):
            return int(v) if v.is_integer() and abs(v) < 2**63 else v
        return str(v)

    body = tomli_w.dumps({section: {k: plain(v) for k, v in table.items()}
                          for section, table in tables.items() if table})
    head = "".join(f"# {c}\n" for c in comments)
    return head + ("\n" if head and body else "") + body


# ----------------------------------------------------------------- writing
# Every file codesign writes goes through `write_file`: where the caller (the
# user's flag) points and nowhere else, atomically (a temp file beside the
# target, created O_CREAT|O_EXCL|O_NOFOLLOW so that nothing planted under its
# name is followed or reused, then `os.replace`: a reader sees the old file or
# the new one, never half of one, and a link at the final name is replaced, never
# written through), never onto a symbolic link planted at the final name (refused).
# `check_outputs` is what a command asks before it does any work: no output onto
# an input or onto another output (same file by resolved path and, where it
# exists, by device and inode: a symbolic or hard link to an input is the input).
STDOUT = "-"  # an output named "-" is standard output (text formats only)
_TEMP_NAME_CHARS = 200  # of the target's name in its temp file's (a name is <= 255 bytes)


def is_stdout(path) -> bool:
    return path is not None and os.fspath(path) == STDOUT


def _identity(path) -> tuple[str, tuple[int, int] | None]:
    """(the resolved path, (st_dev, st_ino) where the file exists) of `path`."""
    try:
        st = os.stat(path)
        inode = (st.st_dev, st.st_ino)
    except OSError:
        inode = None
    return os.path.realpath(path), inode


def same_file(a, b) -> bool:
    """Whether paths `a` and `b` name one file: one resolved path, or one inode
    (a hard link, a symbolic link, a bind mount)."""
    (ra, ia), (rb, ib) = _identity(a), _identity(b)
    return ra == rb or (ia is not None and ia == ib)


def check_output(path, flag: str, *, binary: bool = False, what: str = "figure") -> None:
    """An output path the user gave with `flag`, before anything is computed:
    `-` (standard output) only for a text format; not a symbolic link (refused:
    codesign writes no file through a link someone may have planted); not a
    directory; in a folder that exists. Each is a one-line ValueError naming
    `flag` and the path."""
    if is_stdout(path):
        if binary:
            raise ValueError(f"{flag} -: a {what} is a binary file and does not go to standard "
                             "output; name a file")
        return
    shown = f"{flag} {os.fspath(path)!r}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ValueError(f"{shown} cannot be written: {e.strerror or e}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise ValueError(f"{shown} is a symbolic link; codesign does not write through one: name "
                         "the file itself, or remove the link (standard output: -)")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{shown} is a directory; name a file")
    if st is not None and not (stat.S_ISREG(st.st_mode) or _streamed(st.st_mode)):
        raise ValueError(f"{shown} is not a regular file (a socket or a block device); name a "
                         "file")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"{shown}: its folder {folder!r} does not exist")


def check_outputs(outputs: dict, inputs: dict, binary: frozenset | set = frozenset()) -> None:
    """Every output of one command (`outputs`: flag -> path, None for an output not
    asked for) checked (`check_output`; flags in `binary` are binary formats), and
    none of them the same file as an input (`inputs`: words naming it -> path; a path
    that does not exist is no file) or as another output; two outputs on standard
    output are one too many. Each is a one-line ValueError naming the flags."""
    given = {flag: p for flag, p in outputs.items() if p is not None and os.fspath(p) != ""}
    for flag, path in given.items():
        check_output(path, flag, binary=flag in binary)
    files = {w: p for w, p in inputs.items() if p is not None and not is_stdout(p)
             and os.path.lexists(p)}
    seen: dict = {}
    for flag, path in given.items():
        shown = f"{flag} {os.fspath(path)!r}" if not is_stdout(path) else f"{flag} -"
        if is_stdout(path):
            if STDOUT in seen:
                raise ValueError(f"{shown}: {seen[STDOUT]} is standard output too; one output "
                                 "can go there, name a file for the other")
            seen[STDOUT] = flag
            continue
        for words, source in files.items():
            if same_file(path, source):
                raise ValueError(f"{shown} is {words} (an input of this command); writing it "
                                 "would overwrite it: name another file")
        for other, other_path in seen.items():
            if other != STDOUT and same_file(path, other_path):
                raise ValueError(f"{shown} is {other}'s file too; name two files")
        seen[flag] = path


def _streamed(mode: int) -> bool:
    """Whether an existing output is written in place, not replaced: a named pipe
    or a character device (/dev/null, a terminal), which a rename would replace."""
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _open_temp(path: str) -> tuple[int, str]:
    """A new temp file beside `path`, opened for writing: O_EXCL and O_NOFOLLOW, a
    random name (nothing planted under it is reused or followed)."""
    import secrets

    folder, name = os.path.split(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(
        os, "O_CLOEXEC", 0)
    for _ in range(64):
        tmp = os.path.join(folder, f".{name[:_TEMP_NAME_CHARS]}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:  # the file's name, not the temp file's
            raise OSError(e.errno, f"{e.strerror} (a new file in its folder, renamed over it)",
                          path) from None
    raise FileExistsError(f"cannot make a temp file beside {path!r}")


def _write(f, content) -> None:
    if callable(content):
        content(f)
    elif isinstance(content, bytes):
        f.write(content)
    else:
        for piece in [content] if isinstance(content, str) else content:
            f.write(piece.encode("utf-8"))
    f.flush()


def write_file(path, content, *, flag: str | None = None, stdout=None) -> None:
    """Write `content` (str, bytes, an iterable of str written as it comes, or a
    callable given a binary file) to `path`: `-` is `stdout` (default
    sys.stdout; text only); a named pipe or a character device (/dev/null) is
    written in place; else a temp file beside `path` (`_open_temp`; an existing
    file's permissions kept), fsync, `os.replace`: on any error the temp file goes
    and `path` is as it was. A symbolic link at `path` is a ValueError naming
    `flag` (or the path)."""
    import sys

    if is_stdout(path):
        stream = stdout or sys.stdout
        if callable(content) or isinstance(content, bytes):
            raise ValueError(f"{flag or 'output'} -: a binary format does not go to standard "
                             "output; name a file")
        stream.writelines([content] if isinstance(content, str) else content)
        stream.flush()
        return
    path = os.fspath(path)
    check_output(path, flag or "output")
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    if old is not None and _streamed(old.st_mode):  # /dev/null, a named pipe: in place
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as f:
            _write(f, content)
        return
    fd, tmp = _open_temp(path)
    try:
        if old is not None:  # the file keeps its permissions
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        with os.fdopen(fd, "wb") as f:
            _write(f, content)
            os.fsync(f.fileno())
        if os.path.islink(path):  # planted while this was written
            check_output(path, flag or "output")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def figure_format(path) -> str:
    """The format matplotlib writes for `path`: its extension, else png."""
    ext = os.path.splitext(os.fspath(path))[1][1:].lower()
    return ext or "png"


def write_figure(fig, path, *, flag: str | None = None, **savefig) -> None:
    """A matplotlib figure to `path` (`write_file`; the format from its
    extension, `figure_format`), `savefig`'s keywords passed on."""
    write_file(path, lambda f: fig.savefig(f, format=figure_format(path), **savefig), flag=flag)
