"""Every blocking check runs on every path that can make a version live (issue 47, item 1). Read from the
definitions: a blocking check computed in its asset's own step runs whenever the asset materialises, whoever asked
(a job, a backfill, `shard-assets build`, the discovery sensor, the automation sensor, "Materialize all"); a check in
a step of its own runs only when a run selects it, which the automation sensor's runs did not. Then the real
automation sensor, ticked by Dagster's own daemon code, publishes a new file with all seven checks evaluated."""

import textwrap

import dagster as dg
import pytest
from dagster._core.test_utils import create_test_daemon_workspace_context, instance_for_test, load_remote_repo
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._daemon.asset_daemon import AssetDaemon

import shard_loader
from shard_assets.definitions import build_definitions
from shard_assets.defs.mixture import MixtureSpecsResource
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from tests.support.dagster_helpers import run_sensor_tick, tiny_dataset, write_jsonl

DATASET_BLOCKING = {
    "splits_are_disjoint",
    "no_duplicate_documents",
    "files_present",
    "counts_agree",
    "token_ids_below_vocab",
    "splits_not_empty",
    "reads_with_shard_loader",
}


def _definitions(tmp_path) -> dg.Definitions:
    (tmp_path / "mixtures").mkdir()
    (tmp_path / "mixtures" / "blend.toml").write_text('name = "blend"\n')  # a mixture asset too: its checks count
    return build_definitions(
        {
            "dataset": DatasetResource(spec_path=str(tmp_path / "spec.toml")),
            "store": StoreResource(root=str(tmp_path)),
            "mixtures": MixtureSpecsResource(folder=str(tmp_path / "mixtures")),
        }
    )


def test_every_blocking_check_is_computed_in_its_own_assets_step(tmp_path):
    graph = _definitions(tmp_path).resolve_asset_graph()
    blocking, apart = set(), []
    for node in graph.asset_nodes:
        for key in node.check_keys:
            spec = graph.get(key)
            if spec.blocking:
                blocking.add(key)
    for ad in graph.assets_defs:
        for spec in ad.check_specs:
            if spec.blocking and spec.asset_key not in ad.keys:  # a step of its own: runs only when selected
                apart.append(spec.key.to_user_string())
    assert apart == []
    assert DATASET_BLOCKING <= {k.name for k in blocking}


def test_every_job_that_materialises_an_asset_runs_all_its_blocking_checks(tmp_path):
    defs = _definitions(tmp_path)
    graph = defs.resolve_asset_graph()
    missing = []
    for job in defs.resolve_all_job_defs():
        layer = job.asset_layer.asset_graph
        for key in layer.executable_asset_keys:
            wanted = {k for k in graph.get_check_keys_for_assets({key}) if graph.get(k).blocking}
            missing += [f"{job.name}: {k.to_user_string()}" for k in wanted - set(layer.asset_check_keys)]
    assert missing == []


LOCATION = """
from shard_assets.definitions import build_definitions
from shard_assets.defs.mixture import MixtureSpecsResource
from shard_assets.defs.resources import DatasetResource, StoreResource

defs = build_definitions(
    {{
        "dataset": DatasetResource(spec_path={spec!r}),
        "store": StoreResource(root={store!r}),
        "mixtures": MixtureSpecsResource(folder={mixtures!r}),
    }}
)
"""


@pytest.mark.integration
def test_the_automation_sensor_publishes_a_new_file_only_after_all_seven_blocking_checks(tmp_path):
    """The README's UI flow without the browser: a dataset built, a new file tokenized by the discovery sensor, then
    the automation sensor turned on and ticked by Dagster's asset daemon, whose run publishes the new version."""
    spec, store, resources = tiny_dataset(tmp_path)
    (tmp_path / "mixtures").mkdir()
    location = tmp_path / "location.py"
    location.write_text(
        textwrap.dedent(LOCATION.format(spec=str(spec), store=str(store), mixtures=str(tmp_path / "mixtures")))
    )
    (tmp_path / "dagster").mkdir()
    with instance_for_test(
        temp_dir=str(tmp_path / "dagster"), synchronous_run_launcher=True, synchronous_run_coordinator=True
    ) as inst:
        first = build_dataset(inst, load_spec(spec), resources)
        write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=2)
        run_sensor_tick(inst, resources)  # web.part2 tokenized, not yet published
        before = {r.run_id for r in inst.get_runs()}
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(python_file=str(location), attribute="defs", working_directory=str(tmp_path)),
            location_name="shard_assets",
        )
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), inst) as context:
            repo = load_remote_repo(context, "__repository__")
            inst.start_sensor(repo.get_sensor("default_automation_condition_sensor"))
            daemon = AssetDaemon(settings=inst.get_auto_materialize_settings(), pre_sensor_interval_seconds=0)
            daemon._run_iteration_impl(context, threadpool_executor=None, amp_tick_futures={}, debug_crash_flags={})
        runs = [r for r in inst.get_runs() if r.run_id not in before]
        assert runs and all(r.tags.get("dagster/from_automation_condition") == "true" for r in runs)
        evaluated = {
            e.dagster_event.asset_check_evaluation_data.check_name: e.dagster_event.asset_check_evaluation_data.passed
            for r in runs
            for e in inst.all_logs(r.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
            if e.dagster_event
        }
        assert evaluated == dict.fromkeys(DATASET_BLOCKING, True)
    m = shard_loader.open_manifest(str(store)).manifest
    assert m.version != first.version and "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}


def test_a_mixture_is_drawn_downstream_of_the_manifest_only_when_it_mixes_this_locations_dataset(tmp_path):
    """Issue 47, item 8: every mixture asset depended on the demo dataset's `manifest` whatever its components, so
    `mixture/blend` showed "Unsynced" when an unrelated dataset was republished."""
    import numpy as np

    from tests.support.synthetic import random_docs, write_dataset

    for name in ("store", "elsewhere"):
        write_dataset(tmp_path / name, {"train": [random_docs(np.random.default_rng(0), 5)]})
    (tmp_path / "mixtures").mkdir()
    for name, folder in (("own", "../store"), ("other", "../elsewhere"), ("broken", None)):
        body = f'[[components]]\nmanifest = "{folder}"\nweight = 1\n' if folder else ""
        (tmp_path / "mixtures" / f"{name}.toml").write_text(f'name = "{name}"\ntokens_per_epoch = 100\n{body}')
    graph = _definitions_with_mixtures(tmp_path).resolve_asset_graph()
    parents = {
        n: sorted(k.to_user_string() for k in graph.get(dg.AssetKey(["mixture", n])).parent_keys)
        for n in ("own", "other", "broken")
    }
    assert parents == {
        "own": ["manifest", "mixture/own_components"],
        "other": ["mixture/other_components"],
        "broken": ["mixture/broken_components"],  # a spec that cannot be read names no dataset
    }


def _definitions_with_mixtures(tmp_path) -> dg.Definitions:
    return build_definitions(
        {
            "dataset": DatasetResource(spec_path=str(tmp_path / "spec.toml")),
            "store": StoreResource(root=str(tmp_path / "store")),
            "mixtures": MixtureSpecsResource(folder=str(tmp_path / "mixtures")),
        }
    )
