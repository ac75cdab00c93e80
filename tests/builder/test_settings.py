"""Settings are resolved once, where the user typed them: relative paths against the project root (not whatever
directory Dagster runs in), and a bad environment value is one line naming the variable and what is allowed."""

import dagster as dg
import pytest

from shard_assets.definitions import build_definitions
from shard_assets.defs.resources import DatasetResource, Settings, StoreResource, settings_from_env
from shard_assets.lib.errors import SettingsError

ACCOUNT = "0123456789abcdef0123456789abcdef"


def test_relative_paths_from_the_environment_resolve_against_the_project_root_not_the_current_directory(
    tmp_path, monkeypatch
):
    project, elsewhere = tmp_path / "project", tmp_path / "project" / ".dagster_home"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)  # where `dagster dev` runs the code location
    env = {"SHARD_PROJECT_ROOT": str(project), "SHARD_DATASET_SPEC": "specs/my.toml", "DATASET_STORE_ROOT": "out/store"}
    assert settings_from_env(environ=env) == Settings(str(project / "specs/my.toml"), str(project / "out/store"))
    assert settings_from_env(environ={"SHARD_PROJECT_ROOT": str(project)}) == Settings(
        str(project / "data/demo/demo.toml"), str(project / "data/store")
    )
    assert (
        settings_from_env(spec="/abs/spec.toml", store="s3://bucket/prefix", environ=env).store_root
        == "s3://bucket/prefix"
    )


def test_the_code_location_and_a_launchpad_path_use_the_project_root(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / ".dagster_home").mkdir(parents=True)
    monkeypatch.chdir(project / ".dagster_home")
    for var in ("SHARD_DATASET_SPEC", "DATASET_STORE", "DATASET_STORE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SHARD_PROJECT_ROOT", str(project))
    resources = build_definitions().resources
    assert resources["dataset"].spec_path == str(project / "data/demo/demo.toml")
    assert resources["store"].root == str(project / "data/store")
    assert StoreResource(root="data/store").store().root == project / "data/store"  # as typed in the launchpad
    with pytest.raises(Exception, match=str(project / "data/demo/demo.toml")):
        DatasetResource(spec_path="data/demo/demo.toml").spec()
    assert "project root" in StoreResource.model_fields["root"].description


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"DATASET_STORE": "r3"},
            r"^DATASET_STORE='r3' is not one of local, s3, r2; unset it for the local folder data/store$",
        ),
        (
            {"DATASET_STORE": "r2", "R2_DATASET_BUCKET_NAME": "b"},
            r"^R2_DATASET_ACCOUNT_ID is not set; .*32 hex digits.*S3_ENDPOINT_URL",
        ),
        (
            {"DATASET_STORE": "r2", "R2_DATASET_BUCKET_NAME": "b", "R2_DATASET_ACCOUNT_ID": "my-account"},
            r"^R2_DATASET_ACCOUNT_ID is not a Cloudflare account id \(32 hex digits",
        ),
        ({"DATASET_STORE": "r2", "R2_DATASET_ACCOUNT_ID": ACCOUNT}, r"^R2_DATASET_BUCKET_NAME is not set"),
        (
            {"DATASET_STORE": "r2", "R2_DATASET_BUCKET_NAME": "b", "S3_ENDPOINT_URL": "localhost:8333"},
            r"^S3_ENDPOINT_URL='localhost:8333' has no scheme; write it as https://",
        ),
        (
            {"DATASET_STORE": "s3", "DATASET_STORE_ROOT": "data/store"},
            r"^DATASET_STORE=s3 needs DATASET_STORE_ROOT \(or --store\) as s3://bucket/prefix",
        ),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_the_variable(env, message):
    with pytest.raises(SettingsError, match=message):
        settings_from_env(environ=env)


def test_r2_settings_name_the_key_variables_never_their_values():
    settings = settings_from_env(
        environ={
            "DATASET_STORE": "r2",
            "R2_DATASET_BUCKET_NAME": "b",
            "DATASET_BINS_PATH": "/ds/demo/",
            "R2_DATASET_ACCOUNT_ID": ACCOUNT,
        }
    )
    assert (
        settings.store_root == "s3://b/ds/demo"
        and settings.endpoint_url == f"https://{ACCOUNT}.r2.cloudflarestorage.com"
    )
    assert isinstance(settings.access_key_id, dg.EnvVar) and settings.access_key_id == "R2_DATASET_WRITE_ACCESS_KEY_ID"
    assert Settings.of(settings.resources()) == settings  # the value pool processes rebuild their resources from
