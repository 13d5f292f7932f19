"""A setting is read in one place: explicit callers aside, environment over default, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from arcana_loop.knowledge import settings
from arcana_loop.knowledge.settings import Setting, SettingError


def test_an_unset_or_blank_variable_gives_the_default_and_a_set_one_its_value() -> None:
    rows = settings.PENDING_MAX_ROWS
    assert rows.read({}) == 10_000
    assert rows.read({rows.env: "  "}) == 10_000
    assert rows.read({rows.env: "0"}) == 0  # a value equal to a falsy default is still given
    assert (
        settings.CACHE_DIR.read({settings.CACHE_DIR.env: "~/models"})
        == Path("~/models").expanduser()
    )


def test_a_default_dict_is_a_fresh_copy_each_read() -> None:
    options = Setting(env="ARCANA_LOOP_X", kind=dict, default={}, help="x")
    first = options.read({})
    first["mode"] = "hybrid"
    assert options.read({}) == {}


@pytest.mark.parametrize(
    ("setting", "raw", "message"),
    [
        (
            settings.PENDING_MAX_ROWS,
            "-3",
            "ARCANA_LOOP_PENDING_MAX_ROWS must be a whole number of at least 0, got '-3'",
        ),
        (
            settings.REBUILD_MIN_SHARE,
            "half",
            "ARCANA_LOOP_REBUILD_MIN_SHARE must be a number of at least 0, got 'half'",
        ),
        (
            settings.SERVER_IDLE_SECONDS,
            "0",
            "ARCANA_LOOP_SERVER_IDLE_SECONDS must be a number greater than 0, got '0'",
        ),
        (
            settings.SERVER_IDLE_SECONDS,
            "inf",
            "ARCANA_LOOP_SERVER_IDLE_SECONDS must be a number greater than 0, got 'inf'",
        ),
        (
            settings.EMBEDDINGS,
            "minilm\nx",
            "ARCANA_LOOP_EMBEDDINGS must be one line of text, got 'minilm\\nx'",
        ),
        (
            settings.PGDATA,
            "~no-such-user-here/data",
            "ARCANA_LOOP_PGDATA must be a path, got '~no-such-user-here/data'",
        ),
    ],
)
def test_a_value_a_setting_cannot_take_is_one_line_naming_the_variable(
    setting: Setting, raw: str, message: str
) -> None:
    with pytest.raises(SettingError) as caught:
        setting.read({setting.env: raw})
    assert str(caught.value) == message


def test_the_server_reads_its_idle_time_and_data_directory_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from arcana_loop.knowledge import server
    from arcana_loop.knowledge.errors import DatabaseUnavailable

    monkeypatch.setenv(settings.SERVER_IDLE_SECONDS.env, "2.5")
    monkeypatch.setenv(settings.PGDATA.env, str(tmp_path / "data"))
    assert server._idle_seconds() == 2.5
    assert server.pgdata_dir() == tmp_path / "data"
    monkeypatch.setenv(settings.SERVER_IDLE_SECONDS.env, "soon")
    with pytest.raises(DatabaseUnavailable, match="SERVER_IDLE_SECONDS must be a number"):
        server._idle_seconds()
