"""Shared plumbing for CLI commands: the store option, JSON input, output and refusals."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from functools import wraps
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import click

from stateflow.config import Config
from stateflow.doc.canonical import JSON, decode, encode_indented, encode_trusted
from stateflow.errors import NotJSON, StateflowError
from stateflow.store import Store, open_store

F = TypeVar("F", bound=Callable[..., Any])


class _Decimal(click.types.IntParamType):
    """An integer option type reading ASCII decimal text only (``-?[0-9]+``): ``int`` also
    reads "0_1", " 1 ", "+1" and other scripts' digits ("١", "１") as numbers."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value):
            self.fail(f"{value!r} is not a valid integer.", param, ctx)
        return super().convert(value, param, ctx)


class Integer(_Decimal):
    """``type=int``, ASCII decimal only."""


class IntRange(_Decimal, click.IntRange):
    """``click.IntRange``, ASCII decimal only."""


INTEGER: Final = Integer()


class Context:
    """What the global options set: where the store is (opened on first use), which
    configuration file to read (loaded on first use)."""

    def __init__(
        self, store: str | None, config_path: Path | None = None, *, store_given: bool = False
    ) -> None:
        self._store_flag = store
        # ``--store`` was typed on the command line (not taken from STATEFLOW_STORE): it then
        # outranks a server address from the environment (see ``states`` commands' target)
        self.store_given = store_given
        self.config_path = config_path
        self._config: tuple[Config, Path | None] | None = None
        self._store: Store | None = None

    @property
    def config(self) -> Config:
        """The configuration in effect, parsed on first use (a malformed value is refused by the
        command that needs it, not by ``--help``)."""
        return self.settings()[0]

    def settings(self, flags: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Config, Path | None]:
        """The configuration in effect (flags > environment > file); ``flags`` are a command's
        own options (None when not given)."""
        if self._config is None or flags:
            from stateflow.cli.configuration import load

            self._config = load(self.config_path, {"store": {"url": self._store_flag}, **(flags or {})})
        return self._config

    @property
    def store_location(self) -> str | None:
        return self._store_flag or self.settings()[0].store.url

    @store_location.setter
    def store_location(self, value: str | None) -> None:
        """``--store`` given after the subcommand: it wins like the global flag."""
        self._store_flag = value
        self.store_given = True
        self._config = None

    def _open(self, *, create: bool, auto_migrate: bool | None = None, whole: bool = False) -> Store:
        # every command opens its store here, so each waits as configured ([store] wait_seconds,
        # connect_timeout_seconds, statement_timeout_seconds; their environment variables and flags)
        options = self.settings()[0].store.open_options()
        if whole and options["statement_timeout"] is None:
            # a pass over the whole store (check, dump, load) is not a call: its statements may
            # rightly run longer than a call's limit, unless one is configured for it (or the
            # URL's options set one: it wins, as for any call)
            options["statement_timeout"] = 0
        return open_store(self.store_location, create=create, auto_migrate=auto_migrate, **options)

    def store(self, *, whole: bool = False) -> Store:
        """The store, opened (a missing SQLite file created) to write; ``whole``: for a pass over
        all of it, with no statement timeout unless one is configured."""
        if self._store is None:
            self._store = self._open(create=True, whole=whole)
        return self._store

    def deferred(self) -> Store:
        """The store of :meth:`store`, opened (or created) when first used rather than now: a
        call refused for its own arguments — checked before anything touches the store —
        leaves no new store behind."""
        return self._store if self._store is not None else cast(Store, _OnFirstUse(self.store))

    def reader(self, *, whole: bool = False) -> Store:
        """The store for a command that only reads: a missing SQLite file (or its directory) is
        refused with ``store-not-found``, never created (``whole``: as :meth:`store`)."""
        if self._store is None:
            self._store = self._open(create=False, whole=whole)
        return self._store

    def existing(self) -> Store:
        """The store for a command that changes what is already there (a fork, a restore, a
        prune): opened to write as :meth:`store`, but a missing SQLite file is refused with
        ``store-not-found`` as by :meth:`reader` — a mistyped path creates nothing."""
        from stateflow.store.open import sqlite_file

        path = sqlite_file(self.store_location)
        return self.reader() if path is not None and not path.exists() else self.store()

    def unmigrated(self) -> Store:
        """The store for ``migrate``: opened to write (a missing SQLite file is created), its
        schema left as it is for the command to upgrade."""
        if self._store is None:
            self._store = self._open(create=True, auto_migrate=False)
        return self._store

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()


class _OnFirstUse:
    """Stands for a store until something is asked of it, then opens it (see ``deferred``)."""

    def __init__(self, opener: Callable[[], Store]) -> None:
        self._opener = opener
        self._waiting: list[Callable[[], object]] = []

    def when_opened(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` when the store is opened, before what is asked of it then (the states
        service's built-ins: installed by the first call that uses the store, not when the
        service is built)."""
        self._waiting.append(fn)

    def __getattr__(self, name: str) -> Any:
        store = self._opener()
        waiting, self._waiting = self._waiting, []
        for fn in waiting:  # (they may use the store: ``_opener`` now answers it at once)
            fn()
        return getattr(store, name)


pass_context = click.make_pass_decorator(Context)


INTERRUPTED: Final = 130
"""The exit status of a command stopped by Ctrl-C (SIGINT): 128 + the signal's number, as shells
report it; a refusal's is 1."""
TERMINATED: Final = 143
"""The exit status of a command stopped by SIGTERM (128 + 15)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM — a service manager, ``timeout``, ``kill`` — taken as a Ctrl-C is: what the
    command was writing is committed or rolled back whole and its partial files removed (the
    default action would end the process at once and leave them), then exit 143."""


_terminated = False


def on_sigterm(signum: int, frame: Any) -> None:
    """The CLI's SIGTERM handler (:func:`stateflow.cli.main.main` installs it)."""
    global _terminated
    _terminated = True
    raise Terminated()


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C a command caught to say what it left (a partial load, the records a sweep
    erased): :func:`refusals` prints it."""


# C0 and C1 controls, DEL, and the marks that reorder or break a displayed line (bidi embeddings,
# overrides and isolates, LRM/RLM/ALM, the line and paragraph separators)
_MARKS: Final = r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_HIDDEN: Final = re.compile(rf"[\x00-\x1f{_MARKS}]")
_HIDDEN_BUT_LINES: Final = re.compile(rf"[\x00-\x08\x0b-\x1f{_MARKS}]")


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` safe to show on a terminal: each control or reordering character written as its
    escape (``\\x1b``, ``\\u202e``), so a subject key or a message quoting one cannot move the
    cursor, clear the screen or reorder the line around it (``lines`` keeps newlines and tabs).
    JSON output is exact and needs none of this: its encoder escapes controls itself."""
    return (_HIDDEN_BUT_LINES if lines else _HIDDEN).sub(_escaped, text)


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def refusals(fn: F) -> F:
    """Print a refusal as ``error[code]: message`` on stderr and exit 1; a Ctrl-C as
    ``interrupted: what was left`` and exit 130 (click would print only "Aborted!" and exit 1,
    a refusal's status)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StateflowError as exc:
            click.echo(f"error[{exc.code}]: {visible(exc.message, lines=True)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt as exc:
            left = str(exc) if isinstance(exc, Interrupted) else ""
            start = "\n" if sys.stderr.isatty() and not _terminated else ""  # (after the terminal's ^C)
            said = "terminated" if _terminated else "interrupted"
            click.echo(f"{start}{said}{': ' + visible(left, lines=True) if left else ''}", err=True)
            sys.exit(TERMINATED if _terminated else INTERRUPTED)

    return wrapper  # type: ignore[return-value]


def exclusive(*names: str) -> Callable[[F], F]:
    """Refuse options ``names`` (their parameter names) given together as a usage error (exit
    2, as click refuses a malformed command line), before the command opens anything."""

    def decorator(fn: F) -> F:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = [name for name in names if kwargs.get(name) is not None]
            if len(given) > 1:
                flags = [f"--{name.replace('_', '-')}" for name in given]
                raise click.UsageError(f"give {' or '.join(flags)}, not both")
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def decode_arg(raw: str | bytes, name: str, *, exact_integers: bool = False, nonfinite: bool = False) -> JSON:
    """``raw`` decoded; text that does not parse is refused naming the argument it came in
    (``--meta: invalid JSON …``), so a command taking several can be told which one to fix (a
    value JSON cannot hold is named by its own path, ``$.n: …``, as at every door — except, with
    ``exact_integers``, an integer beyond 64 bits in a payload the service checks: kept for it
    to refuse, naming the place as it does at every door, ``ops[0]: value.n: …``)."""
    try:
        return decode(raw, exact_integers=exact_integers, nonfinite=nonfinite)
    except NotJSON as exc:
        # (the parser says "str is not valid UTF-8 … char 0" of such text, wherever the byte is)
        raise NotJSON(f"{name}: {not_utf8(raw) or exc.message}") from None


def not_utf8(raw: str | bytes) -> str | None:
    """Why ``raw`` is not UTF-8 text — naming its first bad byte and that byte's offset — or
    None. An argument holding such bytes comes as a string holding them escaped (surrogates)."""
    if isinstance(raw, str):
        try:
            data = raw.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:  # (a lone surrogate no byte stands for)
            return f"not UTF-8 text (a lone surrogate, U+{ord(raw[exc.start]):04X}, at character {exc.start})"
    else:
        data = raw
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); JSON is read as UTF-8"
        )
    return None


def file_option(what: str) -> Callable[[F], F]:
    """``--file PATH`` of a command that takes JSON (``what``: the JSON it takes), ``-`` for
    stdin as an argument's ``-`` is: one spelling for every such command."""
    return click.option(
        "--file",
        "file",
        type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
        help=f"Read {what} from a file ('-': stdin).",
    )


def read_json_arg(
    text: str | None,
    file: Path | None,
    what: str,
    given: str = "as an argument",
    option: str | None = None,
    *,
    exact_integers: bool = False,
    nonfinite: bool = False,
) -> JSON:
    """JSON from an argument (``given``: how the command takes it; ``option``: its option, if
    it is one), ``--file PATH``, or stdin when the argument or PATH is ``-`` (``exact_integers``,
    ``nonfinite``: as :func:`decode_arg`)."""
    if text is not None and file is not None:
        raise click.UsageError(f"give {what} {given} or with --file, not both")
    if file is not None and str(file) == "-":
        raw: str | bytes = sys.stdin.buffer.read()
        name = "--file - (stdin)"
    elif file is not None:
        raw = file.read_bytes()
        name = f"--file {file}"
    elif text == "-":
        raw = sys.stdin.buffer.read()
        name = f"{option or what} (stdin)"
    elif text is not None:
        raw = text
        name = option or what
    else:
        raise click.UsageError(f"{what} is required (an argument, --file PATH, or - for stdin)")
    return decode_arg(raw, name, exact_integers=exact_integers, nonfinite=nonfinite)


def echo_json(value: JSON, *, pretty: bool | None = None) -> None:
    """JSON on stdout: indented on a terminal, compact when piped."""
    if pretty is None:
        pretty = sys.stdout.isatty()
    sys.stdout.write((encode_indented(value) if pretty else encode_trusted(value)).decode() + "\n")


def counted(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 document``, ``2 documents`` (``nouns``: the plural where it is not ``noun + 's'``)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"
