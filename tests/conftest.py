"""Test tiers (markers registered in pyproject.toml): unmarked tests are the fast unit tier; `integration`
runs real Dagster runs and loopback servers; `system` kills processes, races, and drives the browser.
`scripts/test -m "not integration and not system"` is the fast tier; CI runs every tier."""

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.support.seaweedfs import seaweed  # noqa: F401  (a session fixture: one S3 server shared by every module)
from tests.support.postgres import postgres  # noqa: F401  (a session fixture: one Postgres server)
from tests.support.slurm import slurm  # noqa: F401  (a session fixture: one two-node Slurm cluster)

pytest_plugins = ["tests.support.ci_gate"]  # under CI a skipped integration or system test fails the run

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the Hub is unreachable here: fail fast instead of retrying for a minute

# Property tests judge results, never speed: no per-example deadline and no "too slow" health check, which a
# loaded CI machine would trip on correct code.
settings.register_profile("any-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any-machine")


@pytest.fixture(scope="session")
def demo_spec(tmp_path_factory):
    """The demo corpus and spec, written once per session as `shard-assets demo` writes them."""
    from shard_assets.lib.demo import write_demo

    return write_demo(tmp_path_factory.mktemp("demo"))
