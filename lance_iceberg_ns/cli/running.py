"""``main``: runs a command and turns whatever stopped it into an exit code and one line.

An error is one line on stderr, ``error: <Name> (<Lance code>): <message>``, its message as the
REST server words it (``errors.public_message``: no source paths nor internal class names), or with
``--json`` one JSON object on stderr (stdout carries answers only); ``--debug`` shows the full
message and the traceback. Ctrl-C is ``interrupted``, exit 130.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

import click

from lance_iceberg_ns.cli.base import EXIT_UNEXPECTED, CliError, CliState, cli, exit_code_for

EXIT_INTERRUPTED = 128 + signal.SIGINT  # as a shell reports a command stopped by Ctrl-C


@dataclass(frozen=True)
class Failure:
    """What stopped a command: its kind (a Lance error's name, Usage, Interrupted...), the Lance
    error code if it was one, the message and the exit code."""

    kind: str
    message: str
    exit_code: int
    code: int | None = None

    def line(self) -> str:
        if self.kind in ("Interrupted", "Aborted"):
            return self.message
        if self.kind == "Unexpected":
            return f"error: unexpected {self.message} (run with --debug for details)"
        if self.code is None:
            return f"error: {self.message}"
        return f"error: {self.kind} ({self.code}): {self.message}"

    def as_json(self) -> str:
        fields = {"type": self.kind, "code": self.code, "message": self.message, "exit_code": self.exit_code}
        return json.dumps({"error": fields}, sort_keys=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit code says what kind of failure stopped it (see the package docstring)."""
    state = CliState()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in arguments:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    exit_code = _run(state, arguments)
    if state.abandoned_threads:
        _leave_now(exit_code)
    return exit_code


def _run(state: CliState, arguments: list[str]) -> int:
    try:
        cli.main(arguments, prog_name="lance-iceberg-ns", standalone_mode=False, obj=state)
        return 0
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_UNEXPECTED
    except BaseException as exc:  # every failure (a Rust panic too) ends as one line and an exit code
        failure = _failure(exc, state.debug)
        if state.debug and failure.kind not in ("Interrupted", "Usage"):
            traceback.print_exc()
        as_json = state.as_json or "--json" in arguments
        with contextlib.suppress(OSError):  # stderr gone (a pipe whose reader was interrupted too): the code says it
            click.echo(failure.as_json() if as_json else failure.line(), err=True)
        return failure.exit_code


def _leave_now(exit_code: int) -> NoReturn:
    """End the process without waiting for its threads: Python waits for every one at exit (SIGTERM,
    by default, does not)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(exit_code)


def _failure(exc: BaseException, debug: bool) -> Failure:
    from lance_namespace.errors import LanceNamespaceError

    if any(isinstance(reason, KeyboardInterrupt) for reason in (exc, exc.__cause__, exc.__context__)):
        return Failure("Interrupted", "interrupted", EXIT_INTERRUPTED)  # click turns Ctrl-C into Abort
    if isinstance(exc, click.exceptions.Abort):
        return Failure("Aborted", "aborted", EXIT_UNEXPECTED)
    if isinstance(exc, CliError):
        return Failure(exc.kind, _one_line(exc.format_message()), exc.exit_code)
    if isinstance(exc, click.ClickException):
        return Failure("Usage", _one_line(exc.format_message()), exc.exit_code)
    if isinstance(exc, LanceNamespaceError):
        code = int(exc.code)
        name = type(exc).__name__.removesuffix("Error")
        return Failure(name, _public(str(exc), debug), exit_code_for(code), code)
    return Failure("Unexpected", f"{type(exc).__name__}: {_public(str(exc), debug)}", EXIT_UNEXPECTED)


def _public(message: str, debug: bool) -> str:
    """A message as the REST server would answer it (no source paths, internal class names or
    install paths), unless ``--debug`` asked for all of it."""
    if debug:
        return _one_line(message)
    from lance_iceberg_ns.errors.translation import public_message

    return _one_line(public_message(message))


def _one_line(text: str) -> str:
    return " ".join(text.split())
