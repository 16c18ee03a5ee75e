"""The CLI's shared parts: exit codes, option state, common options, output and paging helpers, groups."""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

# lance_iceberg_ns.errors.codes.ExitCode's numbers for failures that are not Lance errors (a usage
# error, a busy port), here so that the command line starts without loading lance_namespace.
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 5


def exit_code_for(error_code: int) -> int:
    """The exit code for a Lance error code, from the kind of its HTTP status
    (``lance_iceberg_ns.errors.codes``, loaded only once a command has failed)."""
    from lance_iceberg_ns.errors.codes import exit_code_for as exit_code_by_status

    return exit_code_by_status(error_code)


class CliError(click.ClickException):
    """A failure a command explains itself in one line, with its kind (for ``--json``) and exit code."""

    def __init__(self, message: str, kind: str, exit_code: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code  # type: ignore[misc]  # click's is per class; this one's per failure


def listening_error(host: str, port: int, exc: OSError) -> CliError:
    """One line for a port that cannot be listened on (busy, or not this machine's address)."""
    if exc.errno == errno.EADDRINUSE:
        return CliError(f"Port {port} on {host} is busy: stop what listens there or give --port", "Unavailable",
                        EXIT_UNAVAILABLE)  # fmt: skip
    return CliError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}", "Unavailable", EXIT_UNAVAILABLE)


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (IPv6 for an address with a colon), as uvicorn binds
    one, inheritable by the server's worker processes; a CliError in one line when it cannot be."""
    bound = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        bound.bind((host, port))
    except OSError as exc:
        bound.close()
        raise listening_error(host, port, exc) from None
    bound.set_inheritable(True)
    return bound


@dataclass
class CliState:
    """The options given so far, from the group and then the command."""

    catalog: str | None = None
    endpoint: str | None = None
    root: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    as_json: bool = False
    debug: bool = False
    delimiter: str = "."
    # threads that must not hold the process once the command has failed (requests a server's
    # graceful stop cut off): the process leaves without waiting for them
    abandoned_threads: bool = False

    def resolved(self) -> dict[str, str]:
        """The bridge properties from every source; an unknown key is a usage error."""
        from lance_iceberg_ns.cli.feedback import check_property_keys
        from lance_iceberg_ns.config.sources import resolve_properties

        explicit = {**self.properties, "endpoint": self.endpoint, "root": self.root}
        properties = resolve_properties({k: v for k, v in explicit.items() if v is not None}, catalog=self.catalog)
        check_property_keys(properties)
        return properties

    def root_for(self, command: str) -> str:
        """The storage root, for a command that places data: it must be given (flag, property,
        ``LANCE_ICEBERG_ROOT`` or a pyiceberg catalog), never the current directory by default."""
        root = self.resolved().get("root")
        if not root:
            raise click.UsageError(
                f"{command} places data under the storage root: give --root DIR (or -p root=DIR, LANCE_ICEBERG_ROOT)"
            )
        return root

    def namespace(self) -> Any:
        from lance_iceberg_ns import IcebergLanceNamespace

        properties = self.resolved()
        if not properties.get("endpoint"):
            raise click.UsageError(
                "No catalog: give --endpoint URL, --catalog NAME (pyiceberg) or set LANCE_ICEBERG_ENDPOINT"
            )
        return IcebergLanceNamespace(**properties)

    def call(self, operation: str, identifier: str, **fields: Any) -> Any:
        """One namespace operation on the object an identifier names, with its other fields."""
        return getattr(self.namespace(), operation)({"id": self.identifier(identifier), **fields})

    def identifier(self, text: str) -> list[str]:
        return [] if text == "" else text.split(self.delimiter)

    def name(self, parts: Iterable[str]) -> str:
        return self.delimiter.join(parts)


def current_state() -> CliState:
    """The options of the command running now (``CliState``)."""
    return click.get_current_context().ensure_object(CliState)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Store an option in the shared state (a command's value overrides the group's)."""
    state = ctx.ensure_object(CliState)
    if value is None or value == () or value is False:
        return
    if param.name in ("properties", "property_files"):
        for item in value:
            key, separator, text = item.partition("=")
            if not separator or not key:
                raise click.BadParameter(f"expected key=value, got {item!r}", ctx=ctx, param=param)
            state.properties[key] = _read_secret(text, ctx, param) if param.name == "property_files" else text
    else:
        setattr(state, str(param.name), value)


def _read_secret(path: str, ctx: click.Context, param: click.Parameter) -> str:
    """A property's value kept in a file (a token, a client secret), its line end dropped."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", ctx=ctx, param=param) from None


def common_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The connection and output options, accepted by the group and by every command."""
    options = [
        click.option("--catalog", help="start from this pyiceberg catalog (~/.pyiceberg.yaml, PYICEBERG_CATALOG__*)"),
        click.option("--endpoint", help="the Iceberg REST catalog URL"),
        click.option("--root", help="storage root for tables declared without a location"),
        click.option(
            "-p", "--property", "properties", multiple=True, metavar="KEY=VALUE", help="a bridge property (repeatable)"
        ),
        click.option(
            "--property-file",
            "property_files",
            multiple=True,
            metavar="KEY=PATH",
            help="a bridge property read from a file, for secrets kept off the command line (repeatable)",
        ),
        click.option("--json", "as_json", is_flag=True, default=None, help="print JSON for scripts"),
        click.option("--debug", is_flag=True, default=None, help="log at DEBUG and show tracebacks"),
        click.option("--delimiter", help="what joins identifier parts (default '.')"),
    ]
    already = len(getattr(function, "__click_params__", []))  # the command's own, decorated first
    for option in reversed(options):
        function = option(function)
    for param in function.__click_params__[already:]:  # type: ignore[attr-defined]
        param.expose_value = False
        param.callback = _remember
        param.is_eager = True
    return function


def object_command(
    group: click.Group, name: str, argument: str, cls: type[click.Command] = click.Command
) -> Callable[[Callable[..., Any]], click.Command]:
    """A command of ``group`` on one object, named by ARGUMENT (its identifier), that takes the
    common options too; the options and arguments decorated below it follow ARGUMENT."""

    def decorate(function: Callable[..., Any]) -> click.Command:
        command = group.command(name, cls=cls)(click.argument(argument)(common_options(function)))
        command.params.sort(key=lambda param: param.callback is _remember)  # common options last in help
        return command

    return decorate


def emit(data: Any, human: Callable[[], None]) -> None:
    """JSON with ``--json``, else the human form."""
    if current_state().as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human()


def show_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print rows under their column names, for a person."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    Console(width=200, soft_wrap=True).print(table)


def show_fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """Print the fields that have a value, one a row, for a person."""
    show_table(("field", "value"), ((key, value) for key, value in pairs if value not in (None, "", {}, [])))


def cli_value(text: str) -> Any:
    """A parameter given on the command line: a number or a boolean as such, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def each_page(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every page of a listing, following its page tokens."""
    token = None
    while True:
        page = fetch(token)
        yield page
        token = page.page_token
        if not token:
            return


def all_pages(fetch: Callable[[str | None], Any], items: str) -> list[Any]:
    """The ``items`` of every page of a listing, in order."""
    return [item for page in each_page(fetch) for item in getattr(page, items) or []]


def page_fetcher(ns: Any, operation: str, **request: Any) -> Callable[[str | None], Any]:
    """One page of a listing operation for a page token, the rest of its request fixed."""
    return lambda token: getattr(ns, operation)({**request, "page_token": token})


# --- the command tree -------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lance-iceberg-ns", prog_name="lance-iceberg-ns", message="%(prog)s %(version)s")
@common_options
def cli() -> None:
    """Lance tables in an Apache Iceberg REST catalog."""


@cli.group()
def namespaces() -> None:
    """Namespaces: [warehouse, namespace...]."""


@cli.group()
def tables() -> None:
    """Lance tables: [warehouse, namespace..., table]."""
