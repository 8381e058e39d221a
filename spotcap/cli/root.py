"""The root of the `spotcap` command: subcommands imported on use, global options accepted
after the subcommand too, and every failure that escapes a command turned into a sentence.

Subcommands live in modules that import heavy libraries (pyarrow, psycopg, nats, ...); the root
names them with their one-line help and imports a module only when its command runs, so
`spotcap --help` and the small commands start without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from spotcap.config import ConfigError, Settings
from spotcap.fail import fail


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """A subcommand by the function that imports it, and its one-line help."""

    load: Callable[[], click.Command]
    short_help: str


@dataclass(frozen=True, slots=True)
class GlobalOption:
    """A root option that a subcommand accepts too (``spotcap topics list --home DIR``)."""

    name: str  # the root's parameter name, as `Settings.load` takes it
    flag: str
    metavar: str
    help: str


def _reload_settings(ctx: click.Context, name: str, value: Any) -> None:
    """Settings again with the values given after the subcommand over the root's."""
    chosen = ctx.meta.setdefault("spotcap.globals", {})
    chosen[name] = value
    root = ctx.find_root().params
    given = {k: root.get(k) for k in ("home", "region", "kafka_bootstrap")}
    given.update(chosen)
    try:
        ctx.obj = Settings.load(**given)
    except ConfigError as error:
        fail(str(error), usage=True)


def _option_for(option: GlobalOption) -> click.Option:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is not None:
            _reload_settings(ctx, option.name, value)

    return click.Option(
        [option.flag],
        default=None,
        metavar=option.metavar,
        expose_value=False,
        callback=callback,
        help=f"{option.help} (also accepted before the command)",
    )


def _add_global_options(command: click.Command, options: Sequence[GlobalOption]) -> None:
    """Give `command` and every command under it the global options it does not define."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_global_options(sub, options)
        if not command.invoke_without_command:
            return  # a group that is a command too (`replay`) takes them as well
    taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
    if getattr(command, "_spotcap_globals", False):
        return
    for option in options:
        if option.flag not in taken:
            command.params.append(_option_for(option))
    command._spotcap_globals = True  # type: ignore[attr-defined]


class SpotcapGroup(click.Group):
    """The root group: lazy subcommands, global options everywhere, failures as sentences."""

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, LazyCommand] | None = None,
        global_options: Sequence[GlobalOption] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.global_options = tuple(global_options)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load()
            self.commands[cmd_name] = command
        if command is not None:
            _add_global_options(command, self.global_options)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The lazy commands' help comes from the table, so `--help` imports none of them.
        rows = []
        for name in self.list_commands(ctx):
            loaded = self.commands.get(name)
            if loaded is not None:
                if loaded.hidden:
                    continue
                rows.append((name, loaded.get_short_help_str(limit=1_000)))
            else:
                rows.append((name, self.lazy[name].short_help))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except (Exception, KeyboardInterrupt) as error:
            from spotcap.failures import fail_on

            fail_on(error)
            raise


__all__ = ["GlobalOption", "LazyCommand", "SpotcapGroup"]
