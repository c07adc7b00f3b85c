"""The boundary around the user's own code: `codesign program` imports the user's
module, calls their builder and has JAX trace their step, and whatever that code
raises is the user's error, not a fault of codesign.

`running(where)` is the one boundary all three go through: any exception but
KeyboardInterrupt (Ctrl-C stays the command's) leaves it as a `UserError`, a
`ValueError` of one line, `<file>:<function>: <ExceptionType>: <message>` (the
message's first line, at most `MAX_MESSAGE_CHARS`), chained to the original so
CODESIGN_DEBUG=1 shows the user's traceback. That covers what a library call
would never catch (SystemExit, MemoryError, RecursionError) and a ValueError
the user's code raises, which must not read as if codesign refused an input.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

# the longest first line of the user's message shown (a message can be megabytes)
MAX_MESSAGE_CHARS = 300


class UserError(ValueError):
    """The user's own code (module, builder or step) failed: one line naming it."""


def location(obj) -> str:
    """`<file>:<function>` of a callable the user gave (a function, a `jax.jit` of
    one, a `functools.partial`, a class); never raises."""
    try:
        while isinstance(obj, functools.partial):
            obj = obj.func
        obj = inspect.unwrap(obj)
        name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        code = getattr(obj, "__code__", None)
        if code is not None:
            return f"{code.co_filename}:{name}"
        try:
            return f"{inspect.getsourcefile(obj) or inspect.getfile(obj)}:{name}"
        except (TypeError, OSError):
            return f"{getattr(obj, '__module__', None) or '?'}:{name}"
    except Exception:  # noqa: BLE001 - a hostile object's attributes: name it by its type
        return f"?:{type(obj).__qualname__}"


def describe(e: BaseException) -> str:
    """`<ExceptionType>: <first line of its message>` (just the type without one); an
    exception whose message cannot be made is named by its type alone."""
    try:
        text = str(e).strip()
    except BaseException:  # noqa: BLE001 - a __str__ that raises: the type says enough
        text = ""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if len(line) > MAX_MESSAGE_CHARS:
        line = f"{line[:MAX_MESSAGE_CHARS]}... ({len(line):,} characters)"
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def describe_value(value) -> str:
    """`repr(value)` for a message, at most `MAX_MESSAGE_CHARS / 3` characters of one
    line; never raises (a user object's __repr__ may)."""
    try:
        text = " ".join(repr(value).split())
    except BaseException:  # noqa: BLE001 - a __repr__ that raises: name the type
        return f"a {type(value).__name__}"
    limit = MAX_MESSAGE_CHARS // 3
    return text if len(text) <= limit else f"{text[:limit]}..."


@contextlib.contextmanager
def running(where: str):
    """Run the user's code named `where` (`<file>:<function>`): any exception it
    raises but KeyboardInterrupt leaves as a one-line `UserError` naming `where`; a
    `UserError` of an inner boundary passes unchanged."""
    try:
        yield
    except (KeyboardInterrupt, UserError):
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit, MemoryError: the user's too
        raise UserError(f"{where}: {describe(e)}") from e


def call(where: str | None, fn, /, *args, **kwargs):
    """`fn(*args, **kwargs)` inside `running` (named by `where`, else `location(fn)`);
    positional-only, so any keyword (a builder's [config]) reaches `fn`."""
    with running(where or location(fn)):
        return fn(*args, **kwargs)
