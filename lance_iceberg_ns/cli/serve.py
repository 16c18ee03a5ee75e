"""The foreground commands ``serve`` and ``demo`` (``local-catalog``: ``local_catalog``; ``main``: ``running``).

``serve``'s flags are the server's settings (``server.settings.SERVE_OPTIONS``), each read by the
server's own reader and each with its ``LANCE_ICEBERG_NS_*`` variable; ``--config-file`` (a file of
such variables) supplies defaults. A flag on the command line wins over the variable, the variable
over the file, the file over the default. ``cli.serving`` turns the options into ``ServeSettings``
and serves them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from lance_iceberg_ns.cli.base import EXIT_UNAVAILABLE, CliError, CliState, cli, common_options, current_state
from lance_iceberg_ns.cli.serving import environment_kept, run_server, settings_from_options
from lance_iceberg_ns.server.settings import (
    AUTH_TOKEN_VARIABLE,
    CONFIG_FILE_VARIABLE,
    SERVE_OPTIONS,
    SERVER_VARIABLE_PREFIX,
    ServeOption,
    ServeSettingsError,
    read_config_file,
)

CONFIG_FILE_VALUES = "lance_iceberg_ns.config_file"  # ctx.meta key: the file's LANCE_ICEBERG_NS_* values


class SettingType(click.ParamType):
    """A server setting's reader as a click type: the flag, its variable and the config file's
    line are read by the same rules as the server reads the environment."""

    def __init__(self, option: ServeOption) -> None:
        self.read = option.read
        self.name = option.read.metavar.lower()

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.read.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default, read already
            return value
        try:
            return self.read(value)
        except ServeSettingsError as exc:
            self.fail(f"{exc}{_from_config_file(param, ctx)}", param, ctx)


def _from_config_file(param: click.Parameter | None, ctx: click.Context | None) -> str:
    """`` (set in --config-file)`` for a value the config file gave: click's hint names only the
    variable, which the operator would look for in the environment in vain."""
    if ctx is None or param is None or not param.name:
        return ""
    return " (set in --config-file)" if ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT_MAP else ""


def _load_config_file(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Read the file's settings before any other option is read (this option is eager), strictly
    (``read_config_file``: a bad line is a usage error naming its line, never its value). Nothing
    is written to the environment, so no worker or subprocess inherits a secret from it: serve
    settings become click defaults (a flag or a variable still wins), the bridge's
    ``LANCE_ICEBERG_*`` properties join the explicit ones unless a variable sets them."""
    from lance_iceberg_ns.config.sources import CATALOG_VARIABLE, environment_properties

    if not path:
        return path
    try:
        found = read_config_file(path)
    except ServeSettingsError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    state = ctx.ensure_object(CliState)
    serve_values: dict[str, str] = {}
    for name, value in found.items():
        if name in os.environ:
            continue  # the variable set in the environment wins
        if name.startswith(SERVER_VARIABLE_PREFIX):
            serve_values[name] = value
        elif name == CATALOG_VARIABLE:
            state.catalog = state.catalog or value
        for key, property_value in environment_properties({name: value}).items():
            if key in ("endpoint", "root"):  # the state's own fields, which the flags set
                setattr(state, key, getattr(state, key) or property_value)
            else:
                state.properties.setdefault(key, property_value)
    defaults = {
        option.field: serve_values[option.variable] for option in SERVE_OPTIONS if option.variable in serve_values
    }
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[CONFIG_FILE_VALUES] = serve_values
    return path


def _flag(option: ServeOption) -> Callable[..., Any]:
    """The click option of a server setting, shown in ``--help`` beside its variable."""
    shown: dict[str, Any] = {"envvar": option.variable, "show_envvar": True, "help": option.help}
    if option.is_switch:
        return click.option(option.flag, is_flag=True, default=option.default, **shown)
    shown["show_default"] = option.default is not None
    return click.option(option.flag, type=SettingType(option), default=option.default, **shown)


def serve_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``serve``'s own options: one for every server setting, ``--auth-token`` and ``--config-file``."""
    options = [_flag(option) for option in SERVE_OPTIONS]
    at_token_file = next(index for index, option in enumerate(SERVE_OPTIONS) if option.field == "auth_token_file")
    options.insert(
        at_token_file,
        click.option(
            "--auth-token",
            "auth_tokens",
            multiple=True,
            help=f"a bearer token clients must present (repeatable; visible in the process list: prefer "
            f"{AUTH_TOKEN_VARIABLE} or --auth-token-file)",
        ),
    )
    options.append(
        click.option(
            "--config-file",
            type=click.Path(exists=True, dir_okay=False),
            is_eager=True,
            expose_value=False,
            callback=_load_config_file,
            envvar=CONFIG_FILE_VARIABLE,
            show_envvar=True,
            help="a file of LANCE_ICEBERG_NS_* (and LANCE_ICEBERG_*) settings, NAME=value a line; "
            "the variables set in the environment win over it",
        )
    )
    for option in reversed(options):
        function = option(function)
    return function


@cli.command("serve")
@serve_options
@common_options
def serve_command(**options: Any) -> None:
    """Serve the Lance REST Namespace API over the Iceberg REST catalog.

    Every option can be given as a LANCE_ICEBERG_NS_* variable instead, or in --config-file."""
    state = current_state()
    from_file = click.get_current_context().meta.get(CONFIG_FILE_VALUES, {})
    with environment_kept():  # serving sets variables for Lance and its workers: as found once it stops
        settings = settings_from_options(state, options, from_file)
        run_server(settings, state)


@cli.command("demo")
@click.option("--data-dir", help="keep the demo's catalog and tables here")
def demo_command(data_dir: str | None) -> None:
    """Run the end-to-end demo on the local catalog."""
    from lance_iceberg_ns.demo import run_demo
    from lance_iceberg_ns.testing import LocalCatalogUnavailable

    try:
        run_demo(data_dir)
    except LocalCatalogUnavailable as exc:  # no JDK (which Spark needs too), or a jar missing
        message = f"The demo cannot run: {exc} (bash scripts/setup.sh demo installs it)"
        raise CliError(message, "Unavailable", EXIT_UNAVAILABLE) from None
