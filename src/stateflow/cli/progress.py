"""Progress of a long command (``check``, ``dump``, ``load``, ``backup``, ``states prune``) on stderr, so that
stdout stays the command's answer: a live status line on a terminal, plain lines every few
seconds and a last one when asked for with ``--progress`` elsewhere (a log), nothing otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

INTERVAL: Final = 5.0
"""Seconds between two plain progress lines."""
REFRESH: Final = 0.1
"""Seconds between two updates of the live line (each update renders it)."""


def option(command: F) -> F:
    """The ``--progress/--no-progress`` option (``progress``: None, decided by the terminal)."""
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Report progress on stderr [default: when stderr is a terminal].",
    )(command)


class Reporter:
    """Counts of what a command has done so far, by kind (``documents``, ``bytes`` …), shown as
    ``LABEL: PHASE: 1,200 documents, 3,400 revisions``; ``bytes`` of a known total show as a
    percentage. Called once per item, so it renders only every :data:`REFRESH` seconds."""

    def __init__(
        self, label: str, show: Callable[[str], None] | None, every: float, *, lines: bool = False
    ) -> None:
        self.label = label
        self.counts: dict[str, int] = {}
        self.total: int | None = None
        self._phase = ""
        self._show = show
        self._every = every
        self._lines = lines
        """plain lines (a log): each phase ends with a ``(done)`` line, as the last one does"""
        self._last = time.monotonic()

    def phase(self, name: str, total: int | None = None) -> None:
        """Start a phase (``checking the dump``); its counts start again from zero. In plain
        lines the phase before it ends with its own ``(done)`` line, so that every phase a log
        shows starting is shown finished, with what it counted."""
        if self._lines and self._phase and self._show is not None:
            self._show(f"{self.text()} (done)")
        self._phase, self.total, self.counts = name, total, {}
        self._render(force=True)

    def __call__(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n
        self._render()

    def text(self) -> str:
        parts = []
        for what, n in self.counts.items():
            if what == "bytes" and self.total:
                parts.append(f"{min(100, n * 100 // self.total)}%")
            else:
                parts.append(f"{n:,} {what}")
        phase = f"{self._phase}: " if self._phase else ""
        return f"{self.label}: {phase}{', '.join(parts) or 'starting'}"

    def _render(self, *, force: bool = False) -> None:
        if self._show is None:
            return
        now = time.monotonic()
        if force or now - self._last >= self._every:
            self._last = now
            self._show(self.text())


@contextmanager
def reporting(label: str, progress: bool | None) -> Iterator[Reporter]:
    """A :class:`Reporter` for the command ``label``: live on a terminal, plain lines when
    ``progress`` is asked for elsewhere, silent when it is off (or not asked for off a terminal).
    The live line is removed at the end; the plain output ends with a last line."""
    terminal = sys.stderr.isatty()
    if progress is False or (progress is None and not terminal):
        yield Reporter(label, None, 0)
        return
    if not terminal:
        reporter = Reporter(label, lambda text: click.echo(text, err=True), INTERVAL, lines=True)
        yield reporter
        click.echo(f"{reporter.text()} (done)", err=True)
        return
    with status_line(label) as show:
        yield Reporter(label, show, REFRESH)


@contextmanager
def status_line(label: str) -> Iterator[Callable[[str], None]]:
    """A live line on the terminal that is stderr, with a spinner, removed at the end: yields
    the function that changes its text. Stdout stays the command's answer — rich's own status
    sends what is printed there meanwhile to its terminal, so ``cmd > answer.json`` at a
    terminal lost the answer to the screen. A command prints its answer after the line is gone:
    where stdout is the same terminal, text printed under the line would follow its text."""
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    spinner = Spinner("dots", text=label, style="status.spinner")
    with Live(
        spinner, console=Console(stderr=True), transient=True, refresh_per_second=12.5, redirect_stdout=False
    ):
        yield lambda text: spinner.update(text=text)
