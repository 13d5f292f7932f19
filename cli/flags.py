"""The loop's options as command-line flags, made from the options' declarations.

A command names the options it takes with `loop_flags`; each flag's type (and so its
placeholder in help), its ``--name`` and its help come from the option's declaration
(`LoopContext`), so ``ask``, ``chat``, ``mcp``, ``replay`` and ``eval loop`` write no flag
blocks of their own. A command may give a flag another name or help of its own where
its wording says more (``--model`` for ``controller_model``). The command receives the
flags the user gave as one ``options`` dict, keyed by the keyword each goes to.

Flags of the command line's own that several commands share are one dataclass, whose
fields `flag_group` offers as flags (``eval retrieval`` and ``eval loop`` choose their
cases this way).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from arcana_loop.core.context import option_setting

Command = TypeVar("Command", bound=Callable[..., Any])
OPTIONS = "options"
"""The parameter of a command that receives the flags given, as a dict."""


def collection_name(name: str | None) -> str | None:
    """A collection named on the command line, checked: a name no collection can have is a usage error.

    The callback of every ``--collection``/``COLLECTION`` parameter that is looked up
    as given (a blank or over-long name said in one line, not as a traceback).
    """
    if name is not None:
        # imported here: a --help runs this callback too, and must not load the knowledge base
        from arcana_loop.knowledge.names import normalize_collection_name

        try:
            normalize_collection_name(name)
        except (TypeError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from None
    return name


def _collection_names(names: list[str] | None) -> list[str] | None:
    """Every ``--collection`` of a command that asks, checked as `collection_name` checks one."""
    for name in names or []:
        collection_name(name)
    return names


SCOPE_FLAG = Annotated[
    list[str] | None,
    typer.Option(
        "--collection",
        "-c",
        help="Collection(s) to search; repeat to let the controller pick.",
        callback=_collection_names,
    ),
]
"""The ``--collection`` flag of the commands that ask (``ask``, ``chat``)."""
THREAD_FLAG = Annotated[
    str | None,
    typer.Option(
        "--thread-id",
        help="Thread to store the conversation under; an existing thread's conversation continues,"
        " over its collections unless --collection names others (default: a new thread).",
    ),
]
"""The ``--thread-id`` flag of the commands that ask (``ask``, ``chat``)."""
FROM_FLAGS: Any = None
"""The declared default of a parameter the flags fill (``options: dict[str, Any] = FROM_FLAGS``,
or a `flag_group`'s): the command's wrapper always passes it, so the body never sees this."""


@dataclass(frozen=True)
class Flag:
    """One loop option offered as a flag by a command."""

    option: str
    """The `LoopContext` field whose declaration gives the flag's type, name and help."""
    name: str | None = None
    """The flag as typed (default ``--`` and the option's name with dashes)."""
    help: str | None = None
    """Help of the command's own (default: the declaration's)."""
    default: Any = None
    """The value when the flag is not given; ``None`` leaves the option out of ``options``."""
    keyword: str | None = None
    """The key in ``options``: the keyword the command passes it as (default: the option's name)."""

    @property
    def key(self) -> str:
        """The flag's key in ``options`` (and its parameter's name)."""
        return self.keyword or self.option

    def parameter(self) -> inspect.Parameter:
        """The command parameter Typer reads this flag from."""
        setting = option_setting(self.option)
        name = self.name or "--" + self.option.replace("_", "-")
        if setting.kind is bool and "/" not in name:
            name = f"{name}/--no-{name.removeprefix('--')}"
        option = typer.Option(name, help=self.help or setting.help)
        return inspect.Parameter(
            self.key,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[setting.kind | None, option],
        )


RUN_FLAGS = (
    Flag(
        "controller_model",
        "--model",
        "Controller model, e.g. openai:gpt-4o-mini or offline.",
        keyword="controller_llm",
    ),
    Flag(
        "answer_model",
        help="Optional model that rewrites the final answer.",
        keyword="answer_llm",
    ),
    Flag("max_iterations", help="Most controller turns (default 10)."),
    Flag("grounder", "--ground", "Grounder: local or llm_judge.", default="local"),
)
"""The flags of the commands that run the loop (`ask`, `chat`, `mcp`), as `run`'s keywords."""


def with_help(flags: tuple[Flag, ...], **helps: str) -> tuple[Flag, ...]:
    """`flags` with the help of the options named (by option) worded for one command."""
    return tuple(
        dataclasses.replace(f, help=helps[f.option]) if f.option in helps else f for f in flags
    )


def loop_flags(*flags: Flag) -> Callable[[Command], Command]:
    """Give a command the flags of `flags`, in place of its ``options`` parameter.

    The command is called with ``options``: the flags given (a value other than ``None``),
    keyed by `Flag.key`.
    """

    def given(values: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in values.items() if value is not None}

    return _gathered(OPTIONS, [f.parameter() for f in flags], given)


def flag_group(group: type[Any]) -> Callable[[Command], Command]:
    """Give a command the fields of the dataclass `group` as flags, in place of its parameter of that type.

    Each field is one flag: its name is the keyword, its annotation the type and the
    ``typer.Option``, its default the default. Commands that share a set of flags declare
    them once this way, and receive them as one `group` object.
    """
    hints = typing.get_type_hints(group, include_extras=True)
    params = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
        )
        for f in dataclasses.fields(group)
    ]

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        name = next(p.name for p in signature.parameters.values() if p.annotation is group)
        return _gathered(name, params, lambda values: group(**values))(command)

    return decorate


def _gathered(
    name: str, params: list[inspect.Parameter], gather: Callable[[dict[str, Any]], Any]
) -> Callable[[Command], Command]:
    """Put `params` in the place of a command's parameter `name`, which receives `gather` of their values."""

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = list(signature.parameters.values())
        at = [p.name for p in own].index(name)
        spliced = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in (*own[:at], *params, *own[at + 1 :])
        ]
        keys = [p.name for p in params]

        @functools.wraps(command)
        def with_group(**kwargs: Any) -> Any:
            values = {key: kwargs.pop(key) for key in keys}
            return command(**kwargs, **{name: gather(values)})

        # Typer reads the parameters and their types from these, not from the wrapped command
        with_group.__signature__ = signature.replace(parameters=spliced)  # type: ignore[attr-defined]  # read by inspect.signature
        with_group.__annotations__ = {p.name: p.annotation for p in spliced}
        return with_group  # type: ignore[return-value]  # same call, the flags gathered

    return decorate
