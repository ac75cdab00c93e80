"""Mixtures published as a user publishes them: three datasets built by the project from different sources with one
shared `kind = "file"` tokenizer (math about 100x smaller), mixed 0.6 / 0.3 / 0.1 by `shard-assets mix`, and the
file read back as JSON against the contract (MIXTURE-FORMAT, docs/format.md). Refusals (two tokenizers, a corrupted
component file, a cap exceeded) leave the live mixture as it was and show which audit failed in Dagster's check
results; a component whose live manifest moves on stays pinned until the mixture is republished."""

import hashlib
import json
import re
import shutil
from datetime import datetime

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from shard_assets.defs.mixture import mixture_key
from shard_assets.lib.mixture.audits import AUDITS as MIXTURE_AUDITS
from shard_loader.format import check_key
from tests.support.mixtures import (
    WEIGHTS,
    blend_spec,
    build,
    build_corpus,
    dagster_home,
    live_manifest,
    mix,
    shard_assets,
)
from tests.support.mixture_files import MIXTURE_KEYS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    build_corpus(root)
    return root


@pytest.fixture
def root(corpus, tmp_path):
    """A copy of the corpus (sources, specs, tokenizers, stores) that a test may change."""
    copy = tmp_path / "root"
    shutil.copytree(corpus, copy, symlinks=True)
    return copy


def budget_for(root) -> int:
    """web's and code's train tokens together: math (weight 0.1) then takes many passes per mixture epoch."""
    return sum(live_manifest(root / "store" / n)["splits"]["train"]["tokens"] for n in ("web", "code"))


def check_results(root, name: str = "blend") -> dict[str, str]:
    """What the UI shows for the mixture `name`'s asset: the latest result of each of its asset checks."""
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home(root)))) as instance:
        out = {}
        for check in MIXTURE_AUDITS:
            key = dg.AssetCheckKey(mixture_key(name), check)
            history = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
            out[check] = history[0].status.value
        return out


def test_three_datasets_built_from_different_sources_share_one_tokenizer_file(corpus):
    manifests = {n: live_manifest(corpus / "store" / n) for n in ("web", "code", "math", "other")}
    fingerprints = {n: m["tokenizer"]["fingerprint"] for n, m in manifests.items()}
    shared = hashlib.sha256((corpus / "tokenizers/tokenizer.json").read_bytes()).hexdigest()[:16]
    assert fingerprints == {
        "web": shared,
        "code": shared,
        "math": shared,
        "other": hashlib.sha256((corpus / "tokenizers/other.json").read_bytes()).hexdigest()[:16],
    }
    train = {n: m["splits"]["train"]["tokens"] for n, m in manifests.items()}
    assert 50 <= train["code"] / train["math"] and train["web"] / train["math"] <= 200  # about 100x smaller
    assert (corpus / "store/web/tokenizers" / shared / "tokenizer.json").read_bytes() == (
        corpus / "tokenizers/tokenizer.json"
    ).read_bytes()


def test_shard_assets_mix_publishes_the_file_of_the_contract(root):
    budget = budget_for(root)
    done = mix(root, blend_spec(budget, math_cap=1000))
    assert done.returncode == 0, done.stdout + done.stderr
    store = root / "store"
    live = json.loads((store / "mixtures/blend.json").read_text())
    version = live["mixture"]["version"]
    assert re.fullmatch(r"blend-[0-9a-f]{16}", version) and live["mixture"]["name"] == "blend"
    assert (store / f"mixtures/blend/{version}.json").read_bytes() == (store / "mixtures/blend.json").read_bytes()
    assert list(live) == MIXTURE_KEYS
    assert (live["format"], live["format_version"]) == ("shard-mixture", 1)
    datetime.strptime(live["created_at"], "%Y-%m-%dT%H:%M:%SZ")
    manifests = {n: live_manifest(store / n) for n in WEIGHTS}
    tok = manifests["web"]["tokenizer"]
    assert live["tokenizer"] == {
        "fingerprint": tok["fingerprint"],
        "vocab_size": tok["vocab_size"],
        "eod_id": tok["eod_id"],
        "token_dtype": manifests["web"]["token_dtype"],
    }
    assert live["tokens_per_epoch"]["train"] == budget and live["tokens_per_epoch"]["val"] > 0
    assert [c["name"] for c in live["components"]] == list(WEIGHTS)
    assert [c["weight"] for c in live["components"]] == list(WEIGHTS.values()) and sum(
        c["weight"] for c in live["components"]
    ) == pytest.approx(1)
    for c in live["components"]:
        m = manifests[c["name"]]
        pinned = f"{c['name']}/manifests/{m['dataset']['version']}.json"
        assert c["manifest"]["url"] == check_key(pinned, "test")  # pinned, relative to the mixture's store root
        data = (store / pinned).read_bytes()
        assert c["manifest"] == {"url": pinned, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        assert (c["dataset"], c["version"]) == (m["dataset"]["name"], m["dataset"]["version"])
        assert c["tokens"] == {s: info["tokens"] for s, info in m["splits"].items()}
        assert c["max_repeats"] == (1000 if c["name"] == "math" else None)
    assert live["lineage"]["resolved_from"] == {
        "web": str(root / "mixtures/../store/web/manifest.json"),
        "code": str(root / "mixtures/../store/code"),
        "math": str(root / f"mixtures/../store/math/manifests/{manifests['math']['dataset']['version']}.json"),
    }
    assert live["lineage"]["run_id"] and live["lineage"]["code_version"]
    # the small component's implied repeats: in the file (weight x tokens per epoch / tokens) and in the summary
    math = live["components"][2]
    repeats = math["weight"] * budget / math["tokens"]["train"]
    assert repeats > 10
    assert re.search(
        rf"^math\s+0\.100\s+0\.00\d\s+{math['tokens']['train']:,}\s+{round(0.1 * budget):,}\s+"
        rf"{repeats:.3g}\s+1000\s+{math['version']}$",
        done.stdout,
        re.M,
    ), done.stdout
    assert "audits        5 of 5 passed" in done.stdout and f"version       {version} (newly written" in done.stdout
    assert check_results(root) == dict.fromkeys(
        (
            "components_verified",
            "one_tokenizer",
            "weights_positive",
            "repeats_within_caps",
            "tokens_per_epoch_bounded",
        ),
        "SUCCEEDED",
    )
    again = mix(root, blend_spec(budget, math_cap=1000))  # the same inputs: the same version, not written twice
    assert again.returncode == 0 and f"version       {version} (already written" in again.stdout


def test_the_mix_run_is_a_named_dagster_run_whose_metadata_reads_at_a_glance(root):
    done = mix(root, blend_spec(budget_for(root)))
    assert done.returncode == 0, done.stderr
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home(root)))) as instance:
        [run] = instance.get_runs()
        assert (run.job_name, run.asset_selection, run.status) == (
            "mixture_job",
            {mixture_key("blend")},
            dg.DagsterRunStatus.SUCCESS,
        )
        event = instance.get_latest_materialization_event(mixture_key("blend"))
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    live = json.loads((root / "store/mixtures/blend.json").read_text())
    assert meta["version"] == live["mixture"]["version"] and meta["live"] is True
    assert (
        meta["weights"].startswith("![weight against natural share") and "data:image/svg+xml;base64," in meta["weights"]
    )
    assert meta["pinned_versions"] == {c["name"]: c["version"] for c in live["components"]}
    assert meta["component_manifests"] == {c["name"]: c["manifest"]["url"] for c in live["components"]}
    assert meta["implied_epochs/math"] == pytest.approx(
        0.1 * live["tokens_per_epoch"]["train"] / live["components"][2]["tokens"]["train"], rel=1e-5
    )
    assert meta["tokens_per_epoch_train"] == live["tokens_per_epoch"]["train"]
    for c in live["components"]:
        assert f"| {c['name']} | `{c['version']}` | {c['weight']:.3f} |" in meta["components"]


def test_two_tokenizers_are_refused_at_publish_naming_both(root):
    done = mix(root, blend_spec(budget_for(root), weights={"web": 0.5, "other": 0.5}))
    assert done.returncode == 2, done.stdout + done.stderr
    fps = {n: live_manifest(root / "store" / n)["tokenizer"]["fingerprint"] for n in ("web", "other")}
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "one_tokenizer" in error and fps["web"] in error and fps["other"] in error and fps["web"] != fps["other"]
    assert not (root / "store/mixtures/blend.json").exists()
    assert "FAILED: one_tokenizer" in done.stdout and "(NOT replaced: audits failed)" in done.stdout
    assert (
        check_results(root)["one_tokenizer"] == "FAILED" and check_results(root)["components_verified"] == "SUCCEEDED"
    )


def test_a_failed_spec_is_its_own_failed_asset_and_leaves_the_live_mixture_s_checks_passed(root):
    budget = budget_for(root)
    assert mix(root, blend_spec(budget)).returncode == 0
    odd = blend_spec(budget, weights={"web": 0.5, "other": 0.5}).replace('name = "blend"', 'name = "odd"')
    done = mix(root, odd, name="odd")
    assert done.returncode == 2, done.stdout + done.stderr
    assert check_results(root, "blend") == dict.fromkeys(check_results(root, "blend"), "SUCCEEDED")
    assert check_results(root, "odd")["one_tokenizer"] == "FAILED"
    assert (root / "store/mixtures/blend.json").exists() and not (root / "store/mixtures/odd.json").exists()


def test_a_component_that_moves_on_stays_pinned_until_the_mixture_is_republished(root):
    body = blend_spec(budget_for(root), weights={"web": 0.9, "math": 0.1}, math_cap=1000)
    assert mix(root, body).returncode == 0
    first = (root / "store/mixtures/blend.json").read_bytes()
    old_web = json.loads(first)["components"][0]
    (root / "sources/web/pages9.jsonl").write_text(
        (root / "sources/web/pages0.jsonl").read_text().replace("Document 0-", "Document 9-")
    )
    build(root, "web")  # the same store prefix: its manifest.json moves on
    moved = live_manifest(root / "store/web")["dataset"]["version"]
    assert moved != old_web["version"]
    assert (
        root / "store/mixtures/blend.json"
    ).read_bytes() == first  # still the pinned version, whose bytes are intact
    pinned = (root / "store" / old_web["manifest"]["url"]).read_bytes()
    assert (
        hashlib.sha256(pinned).hexdigest() == old_web["manifest"]["sha256"]
        and json.loads(pinned)["dataset"]["version"] == old_web["version"]
    )
    again = mix(root, body)
    assert again.returncode == 0, again.stderr
    second = json.loads((root / "store/mixtures/blend.json").read_text())
    assert (
        second["mixture"]["version"] != json.loads(first)["mixture"]["version"]
        and second["components"][0]["version"] == moved
    )
    assert (
        root / f"store/mixtures/blend/{json.loads(first)['mixture']['version']}.json"
    ).read_bytes() == first  # never rewritten


def test_a_corrupted_component_file_fails_its_audit_and_leaves_the_live_mixture(root):
    assert mix(root, blend_spec(budget_for(root))).returncode == 0
    first = (root / "store/mixtures/blend.json").read_bytes()
    code = json.loads((root / "store/code/manifest.json").read_text())
    shard = next(iter((root / "store/code/tokenized").glob("*/train/*.npy")))  # the first shard is always in the sample
    data = bytearray(shard.read_bytes())
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])  # same size: only its sha256 tells
    shard.write_bytes(bytes(data))
    done = mix(root, blend_spec(budget_for(root), weights={"web": 0.5, "code": 0.4, "math": 0.1}))  # a new version
    assert done.returncode == 2, done.stdout + done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    key = shard.relative_to(root / "store/code").as_posix()
    assert (
        "components_verified: code:" in error
        and key in error
        and "sha256" in error
        and "mixtures/blend.json unchanged" in error
    )
    assert (root / "store/mixtures/blend.json").read_bytes() == first
    assert code["dataset"]["version"] in first.decode()
    assert check_results(root) == {
        "components_verified": "FAILED",
        "one_tokenizer": "SUCCEEDED",
        "weights_positive": "SUCCEEDED",
        "repeats_within_caps": "SUCCEEDED",
        "tokens_per_epoch_bounded": "SUCCEEDED",
    }


def test_a_cap_exceeded_fails_its_audit(root):
    done = mix(root, blend_spec(budget_for(root), math_cap=2))
    assert done.returncode == 2, done.stdout + done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert re.search(
        r"repeats_within_caps: math: [\d.]+ passes over its train split per mixture epoch .* max_repeats is 2", error
    ), error
    assert not (root / "store/mixtures/blend.json").exists()
    assert check_results(root)["repeats_within_caps"] == "FAILED"


def test_a_component_that_cannot_be_read_is_one_line_naming_it(root):
    done = mix(root, blend_spec(budget_for(root)).replace("../store/code", "../store/nothing"))
    assert done.returncode == 2
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert re.search(r"blend.toml: components\[1\].manifest .*/store/nothing: .*nothing", error), error


def test_following_live_versions_is_opt_in_and_republishes_when_a_component_moves(root):
    """The automation conditions as the mixture_follow_live sensor evaluates them (it is off by default)."""
    from dagster._core.definitions.observe import observe

    from shard_assets.definitions import build_definitions
    from shard_assets.defs.mixture import MixtureSpecsResource, mixture_definitions
    from shard_assets.defs.resources import DatasetResource, StoreResource

    (root / "mixtures").mkdir()
    (root / "mixtures/blend.toml").write_text(
        blend_spec(budget_for(root), weights={"web": 0.9, "math": 0.1}).replace(
            "{math}", live_manifest(root / "store/math")["dataset"]["version"]
        )
    )
    specs = MixtureSpecsResource(folder=str(root / "mixtures"))
    resources = {
        "dataset": DatasetResource(spec_path=str(root / "specs/web.toml")),
        "store": StoreResource(root=str(root / "store")),
        "mixtures": specs,
    }
    defs = build_definitions(resources)
    assert defs.resolve_sensor_def("mixture_follow_live").default_status == dg.DefaultSensorStatus.STOPPED
    [components, mixture] = mixture_definitions(specs).assets
    selection = dg.AssetSelection.assets(mixture.key, components.key)
    instance = dg.DagsterInstance.ephemeral()
    clock = datetime(2026, 11, 23, 12, 0, 30)
    cursor = None

    def tick(minutes: float) -> tuple[int, int]:
        """(observations, publishes) the conditions request `minutes` after the last tick."""
        nonlocal clock, cursor
        clock = datetime.fromtimestamp(clock.timestamp() + 60 * minutes)
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=selection, evaluation_time=clock, cursor=cursor
        )
        cursor = result.cursor
        return result.get_num_requested(components.key), result.get_num_requested(mixture.key)

    def publish() -> dict:
        job = defs.resolve_job_def("mixture_job")
        assert job.execute_in_process(instance=instance, asset_selection=[mixture.key]).success
        return json.loads((root / "store/mixtures/blend.json").read_text())

    assert tick(0) == (0, 0)  # nothing is published by itself
    assert tick(10) == (1, 0)  # a cron tick: observe what the components' URLs name
    observe([components], instance=instance, resources=resources)
    assert tick(0.5) == (0, 1)  # first observation: publish
    first = publish()
    observe([components], instance=instance, resources=resources)
    assert tick(10)[1] == 0  # observed again, nothing moved: nothing to republish
    (root / "sources/web/pages9.jsonl").write_text(
        (root / "sources/web/pages0.jsonl").read_text().replace("Document 0-", "Document 9-")
    )
    build(root, "web")
    observe([components], instance=instance, resources=resources)
    assert tick(0.5) == (0, 1)
    second = publish()
    assert (
        second["components"][0]["version"]
        == live_manifest(root / "store/web")["dataset"]["version"]
        != first["components"][0]["version"]
    )
    assert second["components"][1]["version"] == first["components"][1]["version"]  # math is pinned by its spec


def test_a_mixture_of_components_in_a_bucket_is_published_and_audited_there(corpus, tmp_path):
    """The store is s3:// (moto behind the R2-like proxy): components under the mixture's root are named relative to
    it, one elsewhere in the bucket by its absolute URL; all are read and audited with the builder's own client."""
    from tests.support.s3_proxy import ACCESS_KEY, SECRET_KEY, loopback_s3_with_bucket

    with loopback_s3_with_bucket("mixes") as s3:
        client = s3.client(via_proxy=False)
        for name, prefix in (("web", "team/web"), ("code", "team/code"), ("math", "elsewhere/math")):
            bucket = s3.write_store("mixes", prefix)
            for path in sorted(
                p for p in (corpus / "store" / name).rglob("*") if p.is_file() and not p.name.startswith(".")
            ):
                bucket.put_file(path.relative_to(corpus / "store" / name).as_posix(), path)
        body = (
            blend_spec(budget_for(corpus))
            .replace("../store/", "s3://mixes/team/")
            .replace("s3://mixes/team/math/manifests/{math}.json", "s3://mixes/elsewhere/math")
        )
        spec = tmp_path / "blend.toml"
        spec.write_text(body)
        env = {
            "S3_ENDPOINT_URL": s3.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "DATASET_STORE": "s3",
        }
        done = shard_assets(
            ["mix", "--spec", str(spec), "--store", "s3://mixes/team"],
            cwd=tmp_path,
            home=dagster_home(tmp_path),
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        live = json.loads(client.get_object(Bucket="mixes", Key="team/mixtures/blend.json")["Body"].read())
        urls = [c["manifest"]["url"] for c in live["components"]]
        math_version = live_manifest(corpus / "store/math")["dataset"]["version"]
        assert urls == [
            f"web/manifests/{live['components'][0]['version']}.json",
            f"code/manifests/{live['components'][1]['version']}.json",
            f"s3://mixes/elsewhere/math/manifests/{math_version}.json",
        ]
        version = client.get_object(Bucket="mixes", Key=f"team/mixtures/blend/{live['mixture']['version']}.json")[
            "Body"
        ].read()
        assert json.loads(version) == live and "audits        5 of 5 passed" in done.stdout
        assert ACCESS_KEY not in done.stdout + done.stderr and SECRET_KEY not in version.decode()
        # a shard of the component outside the root, corrupted in the bucket: the next version is refused
        key = next(
            k["Key"]
            for k in client.list_objects_v2(Bucket="mixes", Prefix="elsewhere/math/tokenized/")["Contents"]
            if k["Key"].endswith(".npy") and "/train/" in k["Key"]
        )
        data = bytearray(client.get_object(Bucket="mixes", Key=key)["Body"].read())
        data[-2:] = bytes(b ^ 0xFF for b in data[-2:])
        client.put_object(Bucket="mixes", Key=key, Body=bytes(data))
        spec.write_text(body.replace("weight = 0.6", "weight = 0.5"))
        refused = shard_assets(
            ["mix", "--spec", str(spec), "--store", "s3://mixes/team"],
            cwd=tmp_path,
            home=dagster_home(tmp_path),
            env=env,
        )
        assert (
            refused.returncode == 2 and "components_verified: math:" in refused.stderr and "sha256" in refused.stderr
        ), refused.stderr
        assert json.loads(client.get_object(Bucket="mixes", Key="team/mixtures/blend.json")["Body"].read()) == live


def test_a_bad_mixture_spec_or_tokenizer_file_is_one_line_before_any_run(tmp_path):
    home = dagster_home(tmp_path)
    (tmp_path / "blend.toml").write_text('name = "blend"\n[[components]]\nmanifest = "../store/web"\nweight = -1\n')
    out = shard_assets(
        ["mix", "--spec", str(tmp_path / "blend.toml"), "--store", str(tmp_path / "store")], cwd=tmp_path, home=home
    )
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: {tmp_path}/blend.toml: components[0].weight: must be a positive number, got -1"
    ]
    assert not (tmp_path / "store").exists() and not list(home.glob("history/runs/*"))
    (tmp_path / "web.toml").write_text(
        'name = "web"\n[tokenizer]\nkind = "file"\npath = "tok/tokenizer.json"\n'
        '[[sources]]\nname = "s"\nuri = "*.jsonl"\nformat = "jsonl"\n'
    )
    (tmp_path / "a.jsonl").write_text('{"text": "a document long enough to keep around"}\n')
    out = shard_assets(["plan", "--spec", str(tmp_path / "web.toml")], cwd=tmp_path, home=home)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: [tokenizer].path {tmp_path}/tok/tokenizer.json: no such file; "
        "give the path of a tokenizer.json (relative to the spec's folder)"
    ]
