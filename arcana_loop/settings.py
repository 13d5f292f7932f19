"""Settings from the environment: one declaration each, read and checked in one place.

A `Setting` names its environment variable, its type, its default, its help text and its
bounds or choices. `Setting.read` is how a module reads the environment: explicit values
win over it where a caller has them, a variable unset or blank gives the default, and a
value the setting cannot take is one line naming the variable (`SettingError`).
`Setting.check` is the one validation of a value, whichever way it came.

The knowledge base declares its settings with it (`knowledge.settings`), the loop its run
options (`LoopContext`, one field each); no other module reads an ``ARCANA_LOOP_*``
variable. This module imports nothing of the project, so reading a declaration (the CLI
builds its flags from them) costs nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "ARCANA_LOOP_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


MODEL_SPEC = re.compile(r"offline|[^:]*\S[^:]*:.*\S.*")
"""A chat model named in words: 'provider:model' (the parts not blank), or 'offline'."""
MODEL_SPEC_SHAPE = "'provider:model' (e.g. 'openai:gpt-4o-mini') or 'offline'"


class SettingError(ValueError):
    """An environment variable holds a value its setting cannot take."""


MAX_INT = 2**63 - 1
"""The largest whole-number setting: what a checkpoint (msgpack) stores."""


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One option: where it is read from, what it takes, what it defaults to, what it means."""

    env: str
    """The environment variable (``ARCANA_LOOP_...``)."""
    kind: type
    """``str``, ``int``, ``float``, ``bool``, ``dict`` (JSON in the environment) or ``Path``."""
    default: Any
    """The value when nothing is given; ``None`` makes ``None`` a valid value too."""
    help: str
    minimum: float | None = None
    """The least value a number may take."""
    positive: bool = False
    """A number must be above 0 (``minimum`` 0 excluded)."""
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    one_line: bool = False
    """A string is one line, stripped (a value spliced into a configuration file)."""
    shape: str | None = None
    """What the value must be, in words, when the type and bounds do not say it well."""
    pattern: re.Pattern[str] | None = None
    """What a string must match whole (say it in `shape`)."""

    def given(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text, or ``None`` when it is unset or blank."""
        raw = (os.environ if environ is None else environ).get(self.env)
        return raw if raw is not None and raw.strip() else None

    def read(self, environ: Mapping[str, str] | None = None) -> Any:
        """The variable's value, else the default (a fresh copy of a dict).

        Raises:
            SettingError: naming the variable, for a value of the wrong type or out of bounds.
        """
        raw = self.given(environ)
        if raw is None:
            return dict(self.default) if isinstance(self.default, dict) else self.default
        try:
            value = self._parse(raw)
            self.check(self.env, value)
        except (TypeError, ValueError):
            raise SettingError(f"{self.env} must be {self.expects()}, got {raw!r}") from None
        return value

    def _parse(self, raw: str) -> Any:
        if self.kind is bool:
            lowered = raw.strip().lower()
            if lowered not in _TRUE + _FALSE:
                raise ValueError(raw)
            return lowered in _TRUE
        if self.kind is int:
            return int(raw)
        if self.kind is float:
            return float(raw)
        if self.kind is dict:
            return json.loads(raw)
        if self.kind is Path:
            try:
                return Path(raw).expanduser()
            except RuntimeError:  # ~name of no user here: no home directory to expand it to
                raise ValueError(raw) from None
        return raw.strip() if self.one_line else raw

    def check(self, name: str, value: Any) -> None:
        """Raise `TypeError` or `ValueError` (one line, naming `name`) for a value this setting cannot take."""
        if value is None and self.default is None:
            return
        if self.kind is bool:
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        elif self.kind is int or self.kind is float:
            self._check_number(name, value)
        elif self.kind is dict:
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise TypeError(f"{name} must be a dict with string keys")
        elif self.kind is Path:
            if not isinstance(value, Path):
                raise TypeError(f"{name} must be a path, got {type(value).__name__}")
        else:
            self._check_text(name, value)

    def _check_number(self, name: str, value: Any) -> None:
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}: {value!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            none = " or None" if self.default is None else ""
            raise TypeError(f"{name} must be a number{none}, got {type(value).__name__}: {value!r}")
        if self.kind is int and self.minimum is not None and value < self.minimum:
            raise ValueError(f"{name} must be at least {self.minimum:g}, got {value}")
        if self.kind is int and self.maximum is None and value > MAX_INT:
            # a checkpoint stores options as msgpack, whose integers are 64-bit: a larger
            # one would fail the run at its first checkpoint, naming no option
            raise ValueError(f"{name} must be at most {MAX_INT} (64 bits), got {value}")
        if self.kind is float and (not math.isfinite(value) or value < (self.minimum or 0)):
            raise ValueError(
                f"{name} must be a finite number >= {self.minimum or 0:g}, got {value}"
            )
        if self.positive and value <= 0:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            low = self.minimum or 0
            raise ValueError(f"{name} must be between {low:g} and {self.maximum:g}, got {value}")

    def _check_text(self, name: str, value: Any) -> None:
        if self.choices and value not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(self.choices)}, got {value!r}")
        if not isinstance(value, str):
            none = " or None" if self.default is None else ""
            raise TypeError(f"{name} must be a string{none}, got {type(value).__name__}")
        if self.one_line and (not value.strip() or "\n" in value or "\r" in value):
            raise ValueError(f"{name} must be {self.expects()}, got {value!r}")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise ValueError(f"{name} must be {self.expects()}, got {value!r}")

    def expects(self) -> str:
        """What a value must be, in words (``a whole number of at least 0``)."""
        if self.shape is not None:
            return self.shape
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.kind is bool:
            return "true or false (1, yes, on / 0, no, off)"
        if self.kind is dict:
            return "a JSON object"
        if self.kind is int or self.kind is float:
            noun = "a whole number" if self.kind is int else "a number"
            if self.maximum is not None:
                return f"{noun} between {self.minimum or 0:g} and {self.maximum:g}"
            if self.positive:
                return f"{noun} greater than 0"
            return f"{noun} of at least {self.minimum or 0:g}"
        if self.kind is Path:
            return "a path"
        return "one line of text" if self.one_line else "text"
