"""The Dagster private names the execution room depends on, imported one by one: a Dagster upgrade that moves or
renames one fails here, by name, before any run does."""

import importlib

import pytest

from shard_assets.execution import dagster_private


@pytest.mark.parametrize("name", dagster_private.__all__)
def test_each_private_dagster_name_is_where_execution_takes_it_from(name):
    assert getattr(dagster_private, name) is not None


def test_the_daemon_module_a_build_starts_exists():
    assert importlib.util.find_spec(dagster_private.DAEMON_MODULE) is not None


def test_the_private_names_are_what_the_room_uses():
    """Every exported name is used by a module of the room, and every one it imports is exported."""
    import ast
    from pathlib import Path

    room = Path(dagster_private.__file__).parent
    used = set()
    for path in room.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "dagster_private":
                used |= {a.name for a in node.names}
    assert used == set(dagster_private.__all__)
