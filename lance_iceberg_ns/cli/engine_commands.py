"""The tables group's command for Iceberg engines on the same catalog: protect the companion
tables, or check that they are protected (for monitoring)."""

from __future__ import annotations

from collections.abc import Mapping

import click

from lance_iceberg_ns.cli.base import current_state, emit, object_command, show_table, tables
from lance_iceberg_ns.cli.feedback import EXIT_SKIPPED, done, hint, working

# ``tables protect --check`` found a Lance table without its protection: the code a command that
# found something left undone exits with (as a purge that skipped a table), after the full list.
EXIT_UNPROTECTED = EXIT_SKIPPED


class _ProtectCommand(click.Command):
    """Names the protection properties in its help when the help is shown (they live with the
    companions, which the command line loads only when a command runs)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION

        protection = ", ".join(f"{key}={value}" for key, value in ENGINE_PROTECTION.items())
        self.help = (self.help or "").replace("{protection}", protection)
        super().format_help_text(ctx, formatter)


@object_command(tables, "protect", "warehouse", cls=_ProtectCommand)
@click.argument("namespace_ids", nargs=-1, metavar="[NAMESPACE]...")
@click.option(
    "--check",
    is_flag=True,
    help="change nothing: list the Lance tables without their protection, and exit 1 when there is any",
)
def tables_protect(warehouse: str, namespace_ids: tuple[str, ...], check: bool) -> None:
    """Keep Iceberg engines off the Lance tables of WAREHOUSE (or of each NAMESPACE of it, and
    beneath; soft-deleted ones, in the warehouse's trash, when WAREHOUSE alone is given):
    {protection} where missing.
    Tables declared since this protection existed have it, and the bridge restores it on a table's
    next read or write; plain Iceberg tables are never touched. With --check, nothing is changed:
    the tables missing it are listed (and which properties), and the exit code is 1 when there is
    any, 0 otherwise."""
    from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION
    from lance_iceberg_ns.identifiers import parse_namespace_id

    state = current_state()
    ns = state.namespace()
    protected: list[str] = []
    already: list[str] = []
    missing: dict[str, list[str]] = {}
    doing = "checking" if check else "protecting"
    with working(f"{doing} the Lance tables of {warehouse}", state.as_json) as watch:
        for path in namespace_ids or ("",):
            namespace_id = [warehouse, *state.identifier(path)]
            if parse_namespace_id(namespace_id) is None:
                raise click.UsageError("Give the warehouse whose Lance tables to protect")
            found = ns.protect_tables(namespace_id, check=check)  # its errors are Lance errors, with the namespace
            protected += [state.name([warehouse, *identifier]) for identifier in found.protected]
            already += [state.name([warehouse, *identifier]) for identifier in found.already]
            missing |= {state.name([warehouse, *table]): list(lacked) for table, lacked in found.missing.items()}

    if check:
        _report_check(" ".join((warehouse, *namespace_ids)), missing, already, ENGINE_PROTECTION, watch.seconds)
        done(watch, state.as_json)
        if missing:
            raise SystemExit(EXIT_UNPROTECTED)  # click's ctx.exit is not an exit under standalone_mode=False
        return

    def human() -> None:
        click.echo(f"protected {len(protected)} Lance table(s); {len(already)} already were")
        if protected:
            show_table(("protected now", "was missing"), ([name, ", ".join(missing[name])] for name in protected))

    emit(
        {
            "protected": protected,
            "already_protected": already,
            "protected_count": len(protected),
            "already_protected_count": len(already),
            "was_missing": missing,
            "properties": ENGINE_PROTECTION,
            "elapsed_seconds": watch.seconds,
        },
        human,
    )
    done(watch, state.as_json)


def _report_check(
    target: str,
    missing: dict[str, list[str]],
    protected: list[str],
    properties: Mapping[str, str],
    seconds: float,
) -> None:
    """What ``--check`` of ``target`` (the warehouse, and the namespaces given) found: the tables
    without (part of) their protection, and which properties."""

    def human() -> None:
        if not missing:
            click.echo(f"all {len(protected)} Lance table(s) are protected")
            return
        click.echo(
            f"{len(missing)} Lance table(s) without their protection from Iceberg engines; {len(protected)} with it"
        )
        show_table(("unprotected", "missing"), ([name, ", ".join(lacked)] for name, lacked in missing.items()))
        hint(f"restore it with: lance-iceberg-ns tables protect {target}")

    emit(
        {
            "unprotected": [{"table": name, "missing": lacked} for name, lacked in missing.items()],
            "unprotected_count": len(missing),
            "protected_count": len(protected),
            "properties": properties,
            "elapsed_seconds": seconds,
        },
        human,
    )
