"""The mixtures group: per mixture spec in the folder SHARD_MIXTURE_SPECS, an asset `mixture/<name>`. Each run
resolves its spec's components (a live manifest pinned to its version), writes `mixtures/<name>/<version>.json`, audits
exactly that version with blocking checks, and only then replaces `mixtures/<name>.json` (write-audit-publish, as the
manifest). An asset per spec, so each shows its own latest publish and its own checks.

Researchers pin: nothing republishes a mixture by itself. Turning on the `mixture_follow_live` sensor opts in: each
spec's `mixture/<name>_components` then observes, on SHARD_MIXTURE_FOLLOW_CRON, the version its component URLs name,
and a mixture whose components moved is republished (a new version; the pinned old one stays readable)."""

import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from shard_loader.builder_api import split_manifest_url

from ..lib.charts import grouped_bar_chart_svg, markdown_image
from ..lib.errors import MixtureError, SpecError
from ..lib.records import from_dict, to_json
from ..lib.settings import mixture_specs_folder
from ..lib.mixture.audits import AUDITS
from ..lib.mixture.components import current_versions, resolve_mixture
from ..lib.mixture.publish import PublishedMixture, PublishReport, live_mixture_url, publish_mixture
from ..lib.mixture.spec import MixtureSpec, load_mixture_spec, mixture_spec_files
from ..lib.mixture.summary import SPLIT, markdown_table
from ..lib.version import code_version
from .conventions import DATASET_ASSET, AssetConventions
from .audit_checks import audit_check_specs, check_result
from .manifest import manifest
from .resources import StoreResource

# An observable source asset is the way Dagster's automation sees a change outside it: beta, and converted by Dagster
# itself through a deprecated property; neither notice is ours to act on.
warnings.filterwarnings(
    "ignore", message="Function `observable_source_asset` is currently in beta", category=dg.BetaWarning
)
warnings.filterwarnings("ignore", message="Property `OpDefinition.version` is deprecated", category=DeprecationWarning)

AC = dg.AutomationCondition
CODE_VERSION = "mixture-1"
FOLLOW_CRON_ENV = "SHARD_MIXTURE_FOLLOW_CRON"
DEFAULT_FOLLOW_CRON = "*/10 * * * *"
MIXTURE_ASSET: AssetConventions = {"group_name": "mixtures", "owners": DATASET_ASSET["owners"]}
PUBLISH_REPORT = "publish_report"  # the materialization's metadata entry holding the PublishReport

# Opt-in (evaluated only while the mixture_follow_live sensor runs): republish when an observation finds that the
# version a component URL names has changed; this code location's own manifest reaches it through that observation.
FOLLOW_LIVE = (
    AC.any_deps_match(AC.newly_updated()).ignore(dg.AssetSelection.assets("manifest")) & ~AC.in_progress()
).with_label("republish_when_a_component_moves")


class MixtureSpecsResource(dg.ConfigurableResource["MixtureSpecsResource"]):
    """Which mixtures to publish: a folder of mixture specs (TOML), one asset per file, named by its stem."""

    folder: str = ""  # none: no mixtures

    def files(self) -> dict[str, Path]:
        return mixture_spec_files(self.folder) if self.folder else {}

    def spec(self, name: str) -> MixtureSpec:
        return load_mixture_spec(Path(self.folder) / f"{name}.toml")


def mixture_specs_from_env() -> MixtureSpecsResource:
    """SHARD_MIXTURE_SPECS resolved once against the project folder; unset, the code location has no mixtures."""
    return MixtureSpecsResource(folder=mixture_specs_folder())


@dataclass(frozen=True)
class MixtureDefinitions:
    assets: list[dg.SourceAsset | dg.AssetsDefinition]
    jobs: list[Any]  # define_asset_job's jobs: Dagster exports no public name for their type
    sensors: list[dg.AutomationConditionSensorDefinition]


def publish_report(metadata: Mapping[str, dg.MetadataValue]) -> PublishReport:
    """The typed report a mixture materialization carries (every audit's outcome), as the asset wrote it."""
    return from_dict(
        PublishReport, metadata[PUBLISH_REPORT].value, f"mixture materialization metadata {PUBLISH_REPORT}"
    )


def _versions_id(versions: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]


def _metadata(published: PublishedMixture, url: str) -> dict[str, Any]:
    """What a glance at the asset should tell: weights against natural shares, tokens and epochs per component, pins;
    and the publish's report for whoever started the run (`shard-assets mix`), decoded by `publish_report`."""
    m, report = published.mixture, published.report
    rows = m.summary(SPLIT)
    chart = grouped_bar_chart_svg(
        [r.name for r in rows],
        {"weight": [r.weight for r in rows], "natural share": [r.natural for r in rows]},
        "share of train tokens per component",
    )
    return {
        "version": m.version,
        "live": report.live,
        "newly_written": report.created,
        "mixture_url": dg.MetadataValue.url(url) if "://" in url else dg.MetadataValue.path(url),
        "versioned_key": report.key,
        "weights": dg.MetadataValue.md(
            markdown_image(chart, "weight against natural share of train tokens, per component")
        ),
        "components": dg.MetadataValue.md(markdown_table(rows)),
        "pinned_versions": dg.MetadataValue.json({c.name: c.version for c in m.components}),
        "component_manifests": dg.MetadataValue.json({c.name: c.manifest.url for c in m.components}),
        **{f"tokens_per_epoch_{split}": tokens for split, tokens in m.tokens_per_epoch.items()},
        **{f"implied_epochs/{r.name}": float(round(r.epochs, 6)) for r in rows},
        "tokenizer_fingerprint": m.tokenizer.fingerprint,
        PUBLISH_REPORT: dg.MetadataValue.json(json.loads(to_json(report))),
    }


def mixture_key(name: str) -> dg.AssetKey:
    """The asset of the mixture spec `name` (its file's stem): `mixture/<name>`."""
    return dg.AssetKey(["mixture", name])


def mixes_own_dataset(specs: MixtureSpecsResource, name: str, own_root: str) -> bool:
    """Whether the spec `name` names a version of the dataset this code location publishes (at `own_root`): only then
    is its mixture drawn downstream of `manifest`. A spec that cannot be read names none (its run says why)."""
    try:
        spec = specs.spec(name)
    except SpecError:
        return False
    own = os.path.normpath(own_root) if "://" not in own_root else own_root.rstrip("/")
    roots = (split_manifest_url(c.manifest)[0] for c in spec.components)
    return any((os.path.normpath(r) if "://" not in r else r.rstrip("/")) == own for r in roots)


def _spec_assets(name: str, own: bool) -> tuple[dg.SourceAsset, dg.AssetsDefinition]:
    """The spec `name`'s two assets: the observation of the versions its component URLs name, and its mixture with one
    blocking check per audit, downstream of `manifest` when `own` (it mixes this code location's dataset)."""

    @dg.observable_source_asset(
        key=["mixture", f"{name}_components"],  # shown as <name>_components beside <name>
        automation_condition=AC.on_cron(os.environ.get(FOLLOW_CRON_ENV, DEFAULT_FOLLOW_CRON)).with_label(
            "observe_on_cron"
        ),
        group_name=MIXTURE_ASSET["group_name"],
        description=f"The version each of {name}'s component URLs names now (a live manifest.json moves on); observed "
        "on SHARD_MIXTURE_FOLLOW_CRON only while the mixture_follow_live sensor runs.",
    )
    def observed(mixtures: MixtureSpecsResource, store: StoreResource) -> dg.DataVersion:
        client = getattr(store.store(), "client", None)
        return dg.DataVersion(_versions_id(current_versions(mixtures.spec(name), client)))

    key = mixture_key(name)

    @dg.asset(
        key=key,
        deps=[manifest, observed] if own else [observed],
        code_version=CODE_VERSION,
        automation_condition=FOLLOW_LIVE,
        **MIXTURE_ASSET,
        kinds={"json"},
        tags={"stage": "mix"},
        check_specs=audit_check_specs(key, AUDITS),
        description=(
            f"Published datasets blended by weight as the spec {name}.toml says: `mixtures/{name}/VERSION.json` "
            "(immutable, each component pinned to a manifest version by sha256) is written, audited by the blocking "
            f"checks, and only then copied to `mixtures/{name}.json`."
        ),
    )
    def mixture(
        context: dg.AssetExecutionContext, mixtures: MixtureSpecsResource, store: StoreResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:  # type: ignore[type-arg]  # Dagster reads it bare
        objects = store.store()
        lineage = {"run_id": context.run.run_id, "code_version": code_version(), "asset_code_version": CODE_VERSION}
        try:
            resolved = resolve_mixture(mixtures.spec(name), objects, lineage)
        except (SpecError, MixtureError) as exc:  # nothing written: each check says why, as the run's failure does
            for audit in AUDITS:
                yield dg.AssetCheckResult(
                    check_name=audit, passed=False, description=f"not run: the spec is refused: {exc}"
                )
            raise
        published = publish_mixture(objects, resolved)
        report, url = published.report, live_mixture_url(objects, published.mixture.name)
        if not report.live:
            context.log.error(
                f"blocking checks failed ({', '.join(report.failed)}): {report.key} written, {url} left unchanged"
            )
        yield dg.MaterializeResult(
            data_version=dg.DataVersion(published.mixture.version),
            metadata=_metadata(published, url),
            check_results=[check_result(a) for a in report.audits],
        )

    return observed, mixture


def mixture_definitions(specs: MixtureSpecsResource, own_root: str = "") -> MixtureDefinitions:
    """The assets of each spec file in `specs.folder` when the definitions load (a new spec file appears on the next
    reload), the job that publishes them and the opt-in sensor; `own_root`: where this location's dataset is."""
    pairs = [_spec_assets(name, mixes_own_dataset(specs, name, own_root)) for name in sorted(specs.files())]
    assets: list[dg.SourceAsset | dg.AssetsDefinition] = [a for pair in pairs for a in pair]
    job = dg.define_asset_job(
        "mixture_job",
        selection=dg.AssetSelection.assets(*(m for _, m in pairs)),
        executor_def=dg.in_process_executor,
        description="Resolve a mixture spec, write its version, audit it, and make it live if every blocking check "
        "passes.",
    )
    follow = dg.AutomationConditionSensorDefinition(
        "mixture_follow_live",
        target=dg.AssetSelection.assets(*(a.key for a in assets)),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Opt in to following live component manifests: observe them on SHARD_MIXTURE_FOLLOW_CRON and "
        "republish a mixture whose components moved.",
    )
    return MixtureDefinitions(assets, [job], [follow])
