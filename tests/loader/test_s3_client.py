"""The S3/R2 client factory: R2 endpoint from the account id, R2's checksum settings in the client's Config
(never in os.environ), keys from arguments or R2_DATASET_*, and a clear error naming the missing variable."""

from __future__ import annotations

import os

import pytest

import shard_loader
from shard_loader.errors import CredentialsError, SettingsError
from shard_loader.storage.redaction import redact
from shard_loader.storage.s3_client import make_s3_client, r2_endpoint, resolve_settings

KEY_VARIABLES = [
    f"R2_DATASET_{role}_{part}" for role in ("READ", "WRITE") for part in ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY")
]


@pytest.fixture
def no_keys(monkeypatch, tmp_path):
    """An environment in which boto3 finds no credentials at all: no variables, no ~/.aws, no instance metadata."""
    for var in [
        *KEY_VARIABLES,
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "S3_ENDPOINT_URL",
        "R2_DATASET_ACCOUNT_ID",
        "AWS_REQUEST_CHECKSUM_CALCULATION",
        "AWS_RESPONSE_CHECKSUM_VALIDATION",
    ]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


ACCOUNT = "0123456789abcdef0123456789abcdef"


def test_r2_without_keys_names_the_variables_to_set(no_keys, monkeypatch):
    monkeypatch.setenv("R2_DATASET_ACCOUNT_ID", ACCOUNT)
    with pytest.raises(
        CredentialsError, match="set R2_DATASET_READ_ACCESS_KEY_ID and R2_DATASET_READ_SECRET_ACCESS_KEY"
    ) as info:
        shard_loader.open_manifest("r2://bucket/team/demo/manifest.json")
    assert isinstance(info.value, shard_loader.StoreError) and "NoCredentialsError" not in str(info.value)


def test_the_write_role_names_the_write_variables(no_keys):
    with pytest.raises(CredentialsError, match="R2_DATASET_WRITE_ACCESS_KEY_ID and R2_DATASET_WRITE_SECRET_ACCESS_KEY"):
        make_s3_client(role="write")


def test_half_a_key_pair_names_the_missing_half(no_keys, monkeypatch):
    monkeypatch.setenv("R2_DATASET_READ_ACCESS_KEY_ID", "AKIAHALFPAIR0001")
    with pytest.raises(CredentialsError, match="set R2_DATASET_READ_SECRET_ACCESS_KEY"):
        make_s3_client()


def test_the_r2_endpoint_and_checksum_settings_come_from_arguments_not_the_environment(no_keys):
    before = dict(os.environ)
    client = make_s3_client(
        account_id=ACCOUNT, access_key_id="AKIAARGUMENT0001", secret_access_key="secret-from-arguments-0001"
    )
    assert dict(os.environ) == before  # nothing written into the process environment
    assert client.meta.endpoint_url == f"https://{ACCOUNT}.r2.cloudflarestorage.com"
    assert client.meta.config.request_checksum_calculation == "when_required"
    assert client.meta.config.response_checksum_validation == "when_required"
    assert client.meta.config.s3["addressing_style"] == "path"


def test_keys_passed_as_arguments_are_masked_like_those_from_the_environment(no_keys):
    make_s3_client(
        endpoint_url="http://127.0.0.1:9",
        access_key_id="AKIAPASSEDASARG0042",
        secret_access_key="passed-as-argument-secret-0042",
    )
    assert redact("id AKIAPASSEDASARG0042 secret passed-as-argument-secret-0042") == "id *** secret ***"


def test_settings_prefer_arguments_then_the_environment(no_keys, monkeypatch):
    monkeypatch.setenv("R2_DATASET_ACCOUNT_ID", ACCOUNT.upper())
    monkeypatch.setenv("R2_DATASET_READ_ACCESS_KEY_ID", "AKIAENV00001")
    monkeypatch.setenv("R2_DATASET_READ_SECRET_ACCESS_KEY", "env-secret-0001")
    from_env = resolve_settings()
    assert (from_env.endpoint_url, from_env.access_key_id) == (
        f"https://{ACCOUNT}.r2.cloudflarestorage.com",
        "AKIAENV00001",
    )
    explicit = resolve_settings(
        endpoint_url="http://127.0.0.1:1", access_key_id="AKIAARG", secret_access_key="arg-secret"
    )
    assert (explicit.endpoint_url, explicit.access_key_id, explicit.secret_access_key) == (
        "http://127.0.0.1:1",
        "AKIAARG",
        "arg-secret",
    )


@pytest.mark.parametrize(
    "account",
    [
        "",
        "acct",
        "https://0123456789abcdef0123456789abcdef.r2.cloudflarestorage.com",
        "0123456789abcdef0123456789abcdeg",
    ],
)
def test_r2_without_a_valid_account_id_names_the_variable_and_what_it_allows(no_keys, monkeypatch, account):
    monkeypatch.setenv("R2_DATASET_ACCOUNT_ID", account)
    monkeypatch.setenv("R2_DATASET_READ_ACCESS_KEY_ID", "AKIAVALIDKEY0001")
    monkeypatch.setenv("R2_DATASET_READ_SECRET_ACCESS_KEY", "valid-secret-0001")
    with pytest.raises(SettingsError) as info:  # the loader: never AWS's endpoint for an r2:// URL
        shard_loader.open_manifest("r2://bucket/team/demo/manifest.json")
    message = str(info.value)
    assert "R2_DATASET_ACCOUNT_ID" in message and "32 hexadecimal characters" in message and "\n" not in message
    if not account:
        assert "is not set" in message and "S3_ENDPOINT_URL" in message  # the other way to name the endpoint
    with pytest.raises(
        SettingsError, match="R2_DATASET_ACCOUNT_ID"
    ):  # the builder: the same check, before any client exists
        r2_endpoint(account)


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "minio.internal", "ftp://host"])
def test_an_endpoint_without_an_http_scheme_names_the_variable_and_the_forms_it_allows(no_keys, monkeypatch, endpoint):
    monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
    with pytest.raises(
        SettingsError,
        match=r"S3_ENDPOINT_URL=.* is not an endpoint URL: write it with its scheme, http://host:port or https://host",
    ):
        make_s3_client(access_key_id="AKIAVALIDKEY0001", secret_access_key="valid-secret-0001")
    with pytest.raises(SettingsError, match="S3_ENDPOINT_URL"):
        shard_loader.open_manifest("s3://bucket/team/demo/manifest.json")
