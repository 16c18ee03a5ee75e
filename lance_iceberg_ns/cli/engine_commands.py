"""The tables group's command for Iceberg engines on the same catalog: protect the companion tables."""

from __future__ import annotations

import click

from lance_iceberg_ns.cli.base import current_state, emit, object_command, show_table, tables
from lance_iceberg_ns.cli.feedback import done, working


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
def tables_protect(warehouse: str, namespace_ids: tuple[str, ...]) -> None:
    """Keep Iceberg engines off the Lance tables of WAREHOUSE (or of each NAMESPACE of it, and
    beneath; soft-deleted ones too): {protection} where missing.
    Tables declared since this protection existed have it; plain Iceberg tables are never touched."""
    from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION
    from lance_iceberg_ns.identifiers import parse_namespace_id

    state = current_state()
    ns = state.namespace()
    protected, already = [], []
    with working(f"protecting the Lance tables of {warehouse}", state.as_json) as watch:
        for path in namespace_ids or ("",):
            namespace_id = [warehouse, *state.identifier(path)]
            if parse_namespace_id(namespace_id) is None:
                raise click.UsageError("Give the warehouse whose Lance tables to protect")
            found = ns.protect_tables(namespace_id)  # its errors are Lance errors, with the namespace
            protected += [state.name([warehouse, *identifier]) for identifier in found.protected]
            already += [state.name([warehouse, *identifier]) for identifier in found.already]

    def human() -> None:
        click.echo(f"protected {len(protected)} Lance table(s); {len(already)} already were")
        if protected:
            show_table(("protected now",), ([name] for name in protected))

    emit(
        {
            "protected": protected,
            "already_protected": already,
            "protected_count": len(protected),
            "already_protected_count": len(already),
            "properties": ENGINE_PROTECTION,
            "elapsed_seconds": watch.seconds,
        },
        human,
    )
    done(watch, state.as_json)
