"""Mixture specs and the shared tokenizer file, as plain library code: every refusal names the file and the field,
the tokens per epoch follow the budget or the stop rule, and the published document reads back as written."""

import hashlib
import json

import pytest

from shard_assets.lib.charts import grouped_bar_chart_svg
from shard_assets.lib.errors import MixtureError, SpecError, TokenizerError
from shard_assets.lib.mixture.audits import _repeats_within_caps, _weights_positive
from shard_assets.lib.mixture.components import absolute_url, epoch_tokens, mixture_version, url_in_mixture
from shard_assets.lib.mixture.spec import load_mixture_spec, mixture_spec_files, parse_mixture_spec
from shard_assets.lib.spec import TokenizerSpec, load_spec, parse_spec
from shard_assets.lib.tokenizer import build_tokenizer, train_bpe
from shard_loader.errors import ManifestError
from shard_loader.format import Component, MixtureFile, MixtureTokenizer, PinnedManifest, parse_mixture
from tests.support.mixture_files import MIXTURE_KEYS

TEXTS = [f"document {i} about tokenizers, mixtures and weights; {i * 7} apples" for i in range(300)]
SOURCE = '[[sources]]\nname = "s"\nuri = "src/*.jsonl"\nformat = "jsonl"\n'


def _spec(tmp_path, body: str):
    path = tmp_path / "blend.toml"
    path.write_text(body)
    return load_mixture_spec(path)


COMPONENTS = (
    '[[components]]\nmanifest = "web/manifest.json"\nweight = 3\n'
    '[[components]]\nmanifest = "/abs/code"\nweight = 1\nname = "code"\nmax_repeats = 2\n'
)


def test_a_mixture_spec_reads_its_components_relative_to_its_folder(tmp_path):
    spec = _spec(tmp_path, 'name = "blend"\ntokens_per_epoch = 1000\n' + COMPONENTS)
    assert [c.manifest for c in spec.components] == [str(tmp_path / "web/manifest.json"), "/abs/code"]
    assert [(c.weight, c.name, c.max_repeats) for c in spec.components] == [(3.0, None, None), (1.0, "code", 2.0)]
    assert spec.tokens_per_epoch == {"train": 1000} and spec.stop == "first_exhausted"
    table = _spec(tmp_path, 'name = "blend"\nstop = "all_exhausted"\ntokens_per_epoch = { val = 50 }\n' + COMPONENTS)
    assert table.tokens_per_epoch == {"val": 50} and table.stop == "all_exhausted"


@pytest.mark.parametrize(
    "body, message",
    [
        ('name = "blend"\n', r"blend.toml: at least one \[\[components\]\] entry is needed"),
        ('name = "blend"\n[[components]]\nmanifest = "x"\n', r"blend.toml: components\[0\]: missing 'weight'"),
        ('name = "blend"\n[[components]]\nweight = 1\n', r"blend.toml: components\[0\]: missing 'manifest'"),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweight = 0\n',
            r"blend.toml: components\[0\].weight: must be a positive number, got 0",
        ),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweight = -0.5\n',
            r"components\[0\].weight: must be a positive number, got -0.5",
        ),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweight = "a lot"\n',
            r"components\[0\].weight: expected float, got 'a lot'",
        ),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweight = 1\nmax_repeats = 0\n',
            r"components\[0\].max_repeats: must be a positive number",
        ),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweigth = 1\nweight = 1\n',
            r"components\[0\]: unknown field 'weigth'; did you mean 'weight'\?",
        ),
        (
            'name = "blend"\n[[components]]\nmanifest = "x"\nweight = 1\nname = "Web!"\n',
            r"components\[0\].name: 'Web!' must be lowercase",
        ),
        (
            'name = "blend"\nstop = "first_exhaustd"\n' + COMPONENTS,
            r"blend.toml.stop: 'first_exhaustd' is not one of \('first_exhausted', 'all_exhausted'\); "
            r"did you mean 'first_exhausted'\?",
        ),
        (
            'name = "blend"\ntokens_per_epoch = -5\n' + COMPONENTS,
            r"blend.toml: tokens_per_epoch: expected a positive number of tokens, got -5",
        ),
        (
            'name = "blend"\ntokens_per_epoch = { test = 5 }\n' + COMPONENTS,
            r"tokens_per_epoch.test: not a split; splits are \['train', 'val'\]",
        ),
        (
            'name = "blend"\ntokens_per_epoch = { val = 1.5 }\n' + COMPONENTS,
            r"tokens_per_epoch.val: expected a positive number of tokens, got 1.5",
        ),
        ('name = "Blend"\n' + COMPONENTS, r"blend.toml: name 'Blend' must be lowercase"),
        (COMPONENTS, r"blend.toml: missing 'name'"),
        (
            'name = "blend"\ntoken_per_epoch = 5\n' + COMPONENTS,
            r"blend.toml: unknown field 'token_per_epoch'; did you mean 'tokens_per_epoch'\?",
        ),
        (
            'name = "blend"\n' + COMPONENTS.replace("weight = 3\n", 'weight = 3\nname = "code"\n'),
            r"components\[\].name must be unique",
        ),
        ('name = "blend"\n[components\n', r"blend.toml: not valid TOML"),
    ],
)
def test_a_bad_mixture_spec_is_refused_naming_the_field(tmp_path, body, message):
    with pytest.raises(SpecError, match=message):
        _spec(tmp_path, body)


def test_a_missing_mixture_spec_names_the_path(tmp_path):
    with pytest.raises(SpecError, match=f"{tmp_path}/none.toml: mixture spec file not found"):
        load_mixture_spec(tmp_path / "none.toml")


def test_tokens_per_epoch_follow_the_budget_else_the_stop_rule():
    spec = parse_mixture_spec({"name": "m", "components": [{"manifest": "/a", "weight": 1}]}, "m.toml")
    names, weights = ["big", "small"], [0.9, 0.1]
    held = [{"train": 9000, "val": 90}, {"train": 100, "val": 10}]
    assert epoch_tokens(spec, names, weights, held) == (
        {"train": 1000, "val": 100},
        {"train": "first_exhausted", "val": "first_exhausted"},
    )
    rule = parse_mixture_spec(
        {
            "name": "m",
            "stop": "all_exhausted",
            "tokens_per_epoch": {"train": 5000},
            "components": [{"manifest": "/a", "weight": 1}],
        },
        "m.toml",
    )
    assert epoch_tokens(rule, names, weights, held) == (
        {"train": 5000, "val": 100},
        {"train": "tokens_per_epoch", "val": "all_exhausted"},
    )
    rule = parse_mixture_spec(
        {"name": "m", "stop": "all_exhausted", "components": [{"manifest": "/a", "weight": 1}]}, "m.toml"
    )
    assert epoch_tokens(rule, names, [0.5, 0.5], held)[0] == {
        "train": 18000,
        "val": 180,
    }  # big's 9000 at half the tokens


def test_a_split_a_component_lacks_is_left_out_or_refused():
    spec = parse_mixture_spec({"name": "m", "components": [{"manifest": "/a", "weight": 1}]}, "m.toml")
    tokens, how = epoch_tokens(spec, ["a", "b"], [0.5, 0.5], [{"train": 10, "val": 5}, {"train": 10, "val": 0}])
    assert tokens == {"train": 20} and how["val"] == "left out: components ['b'] hold no val tokens"
    with pytest.raises(MixtureError, match=r"m.toml: components: components \['b'\] hold no train tokens"):
        epoch_tokens(spec, ["a", "b"], [0.5, 0.5], [{"train": 10}, {"train": 0}])
    budget = parse_mixture_spec(
        {"name": "m", "tokens_per_epoch": {"val": 9}, "components": [{"manifest": "/a", "weight": 1}]}, "m.toml"
    )
    with pytest.raises(MixtureError, match=r"m.toml: tokens_per_epoch.val: components \['b'\] hold no val tokens"):
        epoch_tokens(budget, ["a", "b"], [0.5, 0.5], [{"train": 10, "val": 5}, {"train": 10, "val": 0}])


def _mixture(weights=(0.75, 0.25), max_repeats=(None, None), tokens_per_epoch=None) -> MixtureFile:
    components = tuple(
        Component(
            name,
            w,
            PinnedManifest(f"{name}/manifests/{name}-0.json", 10, "ab" * 32),
            name,
            f"{name}-0",
            {"train": held, "val": 10},
            cap,
        )
        for name, w, held, cap in zip(("web", "math"), weights, (3000, 100), max_repeats)
    )
    tokens = tokens_per_epoch or {"train": 4000, "val": 20}
    return MixtureFile(
        "blend",
        mixture_version("blend", tokens, components),
        "2026-11-23T12:00:00Z",
        MixtureTokenizer("f" * 16, 300, 0, "uint16"),
        tokens,
        components,
        {"run_id": "r"},
    )


def test_the_published_document_reads_back_as_written_and_its_version_covers_what_it_serves():
    m = _mixture(max_repeats=(None, 4.0))
    doc = json.loads(m.dumps())
    assert list(doc) == MIXTURE_KEYS
    assert (
        doc["mixture"] == {"name": "blend", "version": m.version}
        and doc["format"] == "shard-mixture"
        and doc["format_version"] == 1
    )
    assert list(doc["components"][0]) == ["name", "weight", "manifest", "dataset", "version", "tokens", "max_repeats"]
    assert parse_mixture(m.dumps(), "test") == m
    assert (
        m.version == _mixture(max_repeats=(None, 4.0)).version
        and m.version.startswith("blend-")
        and len(m.version) == len("blend-") + 16
    )
    assert (
        len(
            {
                m.version,
                _mixture(weights=(0.7, 0.3)).version,
                _mixture().version,
                _mixture(tokens_per_epoch={"train": 9, "val": 1}).version,
            }
        )
        == 4
    )
    with pytest.raises(ManifestError, match=r"test: format is 'shard-dataset', expected 'shard-mixture'"):
        parse_mixture(json.dumps({**doc, "format": "shard-dataset"}).encode(), "test")
    with pytest.raises(ManifestError, match=r"test.components\[1\].weight: expected a number, got 'x'"):
        parse_mixture(
            json.dumps({**doc, "components": [doc["components"][0], {**doc["components"][1], "weight": "x"}]}).encode(),
            "test",
        )


def test_weights_and_caps_are_audited_on_the_written_document():
    assert _weights_positive(_mixture()).passed
    bad = _weights_positive(_mixture(weights=(1.0, 0.0)))
    assert not bad.passed and bad.problems == ("math: weight 0.0 is not a positive number",)
    assert _weights_positive(_mixture(weights=(0.5, 0.25))).problems == ("weights sum to 0.75, not 1",)
    # math: 0.25 x 4000 / 100 = 10 passes per mixture epoch
    assert _repeats_within_caps(_mixture(max_repeats=(None, 10.0))).passed
    capped = _repeats_within_caps(_mixture(max_repeats=(None, 9.5)))
    assert (
        not capped.passed
        and capped.problems[0].startswith("math: 10 passes over its train split per mixture epoch")
        and capped.problems[0].endswith("max_repeats is 9.5")
    )


def test_component_urls_are_relative_under_the_mixture_root_else_absolute(tmp_path):
    root = tmp_path / "store"
    assert url_in_mixture(str(root / "web/manifests/web-1.json"), str(root)) == "web/manifests/web-1.json"
    assert url_in_mixture(f"file://{root}/web/manifests/web-1.json", str(root)) == "web/manifests/web-1.json"
    assert url_in_mixture(str(tmp_path / "other/manifests/o-1.json"), str(root)) == str(
        tmp_path / "other/manifests/o-1.json"
    )
    assert url_in_mixture("r2://bucket/mix/web/manifests/w-1.json", "s3://bucket/mix") == "web/manifests/w-1.json"
    assert (
        url_in_mixture("s3://bucket/else/manifests/w-1.json", "s3://bucket/mix")
        == "s3://bucket/else/manifests/w-1.json"
    )
    assert absolute_url("web/manifests/w-1.json", "s3://bucket/mix") == "s3://bucket/mix/web/manifests/w-1.json"
    assert absolute_url("web/manifests/w-1.json", str(root)) == str(root / "web/manifests/w-1.json")
    assert absolute_url("https://host/x/manifests/w.json", str(root)) == "https://host/x/manifests/w.json"


def test_the_spec_folder_lists_mixture_specs_beside_dataset_specs(tmp_path):
    (tmp_path / "blend.toml").write_text('name = "blend"\n' + COMPONENTS)
    (tmp_path / "web.toml").write_text('name = "web"\n' + SOURCE)
    (tmp_path / "broken.toml").write_text("name = [")
    (tmp_path / "notes.txt").write_text("x")
    assert sorted(mixture_spec_files(tmp_path)) == ["blend", "broken"]
    assert mixture_spec_files(tmp_path / "missing") == {}


def test_a_chart_draws_each_series_with_its_values():
    svg = grouped_bar_chart_svg(["web", "math"], {"weight": [0.75, 0.25], "natural share": [0.968, 0.032]}, "share")
    assert svg.count("<rect") == 4 + 2 and all(
        s in svg for s in (">web<", ">math<", ">weight<", ">natural share<", ">0.968<")
    )


# The tokenizer file: one tokenizer.json, many datasets


def _tokenizer_file(tmp_path):
    path = tmp_path / "shared" / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(train_bpe(TEXTS, 300, "<|endoftext|>").to_str(pretty=True))
    return path


def test_a_tokenizer_file_is_used_byte_for_byte_and_shared_across_specs(tmp_path):
    path = _tokenizer_file(tmp_path)
    specs = []
    for name in ("web", "code"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "spec.toml").write_text(
            f'name = "{name}"\n[tokenizer]\nkind = "file"\npath = "../shared/tokenizer.json"\n' + SOURCE
        )
        specs.append(load_spec(folder / "spec.toml"))
    assert specs[0].tokenizer.path == str(tmp_path / "web" / "../shared/tokenizer.json")
    (text_a, record_a), (text_b, record_b) = (build_tokenizer(s.tokenizer, iter(())) for s in specs)
    assert text_a.encode() == text_b.encode() == path.read_bytes()
    assert record_a == record_b and record_a.fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert (record_a.vocab_size, record_a.eod_id, record_a.token_dtype) == (300, 0, "uint16")


@pytest.mark.parametrize(
    "tokenizer, message",
    [
        ('kind = "file"\n', r'spec.toml: \[tokenizer\].path is needed for kind = "file"'),
        (
            'kind = "pretrained"\nname = "gpt2"\npath = "t.json"\n',
            r'spec.toml: \[tokenizer\].path is read only with kind = "file", not \'pretrained\'',
        ),
        (
            'kind = "fil"\npath = "t.json"\n',
            r"spec.toml: \[tokenizer\].kind: 'fil' is not one of \('train_bpe', 'pretrained', 'file'\); "
            r"did you mean 'file'\?",
        ),
        ('kind = "file"\npath = 3\n', r"spec.toml: \[tokenizer\].path: expected str, got 3"),
    ],
)
def test_a_bad_tokenizer_table_is_refused_naming_the_field(tmp_path, tokenizer, message):
    (tmp_path / "spec.toml").write_text('name = "web"\n[tokenizer]\n' + tokenizer + SOURCE)
    with pytest.raises(SpecError, match=message):
        load_spec(tmp_path / "spec.toml")


def test_a_missing_or_unreadable_tokenizer_file_is_one_line_naming_the_path(tmp_path):
    def build(path, eod="<|endoftext|>"):
        return build_tokenizer(TokenizerSpec(kind="file", path=str(path), eod_token=eod), iter(()))

    with pytest.raises(TokenizerError, match=f"^\\[tokenizer\\].path {tmp_path}/none.json: no such file"):
        build(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(
        TokenizerError, match=f"^\\[tokenizer\\].path {tmp_path}/bad.json: not a tokenizers tokenizer.json"
    ) as caught:
        build(tmp_path / "bad.json")
    assert "\n" not in str(caught.value)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(
        TokenizerError, match=f"^\\[tokenizer\\].path {tmp_path}/binary.json: cannot be read as UTF-8 text"
    ):
        build(tmp_path / "binary.json")
    with pytest.raises(TokenizerError, match=f"^\\[tokenizer\\].path {tmp_path}: a folder, not a tokenizer.json"):
        build(tmp_path)
    with pytest.raises(TokenizerError, match=r"has no token '<eos>'; set \[tokenizer\].eod_token"):
        build(_tokenizer_file(tmp_path), eod="<eos>")
    assert (
        parse_spec(
            {
                "name": "w",
                "tokenizer": {"kind": "file", "path": "/x/t.json"},
                "sources": [{"name": "s", "uri": "/x/*.jsonl", "format": "jsonl"}],
            },
            "w",
        ).tokenizer.path
        == "/x/t.json"
    )


def test_a_publish_report_reads_back_typed_from_the_materialization_metadata():
    import dagster as dg

    from shard_assets.defs.mixture import PUBLISH_REPORT, publish_report
    from shard_assets.lib.mixture.publish import PublishReport
    from shard_assets.lib.publish import Audit
    from shard_assets.lib.records import to_json

    report = PublishReport(
        "mixtures/blend/blend-0.json",
        True,
        False,
        (Audit("one_tokenizer", False, "a: f1, b: f2", ("b: tokenizer f2",)), Audit("weights_positive", True, "a: 1")),
    )
    assert publish_report({PUBLISH_REPORT: dg.MetadataValue.json(json.loads(to_json(report)))}) == report
    assert report.failed == ["one_tokenizer"]
