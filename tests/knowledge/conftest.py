"""Load the shared PostgreSQL fixtures when the root conftest has not already."""

from __future__ import annotations

import pytest

_PLUGIN = "tests.fixtures.postgres"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_PLUGIN):
        config.pluginmanager.import_plugin(_PLUGIN)
