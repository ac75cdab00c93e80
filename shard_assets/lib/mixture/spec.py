"""The mixture specification, read from TOML: a name, a token budget per epoch or a stop rule, and components
(a dataset URL and a weight each). Every error names the file and the field."""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shard_loader.builder_api import SPLITS

from ..errors import SpecError
from ..spec import SPEC_NAME, anchored, check_choice, spec_record, uri_scheme
from ..user_files import read_user_file

# How many tokens one mixture epoch serves, per split, when the spec gives no budget for that split:
# "first_exhausted": until the first component (the largest weight for its size) has served one pass of its own
#   tokens: min(tokens_i / weight_i); no component repeats.
# "all_exhausted": until every component has served at least one pass: max(tokens_i / weight_i); the components
#   weighted above their natural share repeat (each within its own epochs).
STOP_RULES = ("first_exhausted", "all_exhausted")


@dataclass(frozen=True)
class ComponentSpec:
    """One component: a dataset URL (a live `manifest.json` or its folder, pinned at publish, or a pinned
    `manifests/<version>.json`) and its relative share of training tokens."""

    manifest: str
    weight: float
    name: str | None = None
    max_repeats: float | None = None  # the most passes over this component one mixture epoch may take


@dataclass(frozen=True)
class MixtureSpec:
    name: str
    components: tuple[ComponentSpec, ...]
    tokens_per_epoch: dict[str, int]  # budgets given by the spec, by split; the other splits follow `stop`
    stop: str = "first_exhausted"
    origin: str = "<mixture spec>"


def _positive(value: float, where: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{where}: must be a positive number, got {value!r}")


def _local_manifest(url: str, where: str) -> None:
    """A local component path through a file (`notes.txt`, `v1.json/x`) is refused here, not as an OS error later."""
    if uri_scheme(url) != "":
        return
    path = Path(url).expanduser()
    if path.is_file() and path.suffix != ".json":
        raise SpecError(
            f"{where}: {path} is a file, not a manifest: name a manifest.json, its folder, or a pinned "
            "manifests/<version>.json"
        )
    for parent in path.parents:
        if parent.is_file():
            raise SpecError(
                f"{where}: {parent} is a file, not a dataset folder: name a manifest.json, its folder, "
                "or a pinned manifests/<version>.json"
            )


def _component(data: Any, where: str, base: Path | None) -> ComponentSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a table ([[components]]), got {data!r}")
    if "manifest" not in data or "weight" not in data:
        missing = [k for k in ("manifest", "weight") if k not in data]
        typos = [f"{k!r} for {m!r}" for m in missing for k in difflib.get_close_matches(m, list(data), 1, 0.7)]
        raise SpecError(
            f"{where}: missing {' and '.join(repr(k) for k in missing)}"
            + (f" (a misspelling? found {', '.join(typos)})" if typos else "")
            + "; a component is a dataset URL (manifest) and a weight"
        )
    if isinstance(data["manifest"], str):  # a relative local path: read relative to the spec's folder
        data = {**data, "manifest": anchored(data["manifest"], base)}
    c = spec_record(ComponentSpec, data, where)
    if not c.manifest:
        raise SpecError(
            f"{where}.manifest: a dataset URL is needed (a manifest.json, its folder, or manifests/<version>.json)"
        )
    _local_manifest(c.manifest, f"{where}.manifest")
    _positive(c.weight, f"{where}.weight")
    if c.max_repeats is not None:
        _positive(c.max_repeats, f"{where}.max_repeats")
    # 2 and 2.0: one version
    c = replace(c, weight=float(c.weight), max_repeats=None if c.max_repeats is None else float(c.max_repeats))
    if c.name is not None and not SPEC_NAME.match(c.name):
        raise SpecError(f"{where}.name: {c.name!r} must be lowercase letters, digits, '-' or '_'")
    return c


def _budgets(value: Any, where: str) -> dict[str, int]:
    """`tokens_per_epoch`: an integer (the train split's budget) or a table by split."""
    table = {"train": value} if not isinstance(value, dict) else value
    budgets = {}
    for split, tokens in table.items():
        if split not in SPLITS:
            raise SpecError(f"{where}.{split}: not a split; splits are {list(SPLITS)}")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            field = where if not isinstance(value, dict) else f"{where}.{split}"
            raise SpecError(f"{field}: expected a positive number of tokens, got {tokens!r}")
        budgets[split] = tokens
    return budgets


def parse_mixture_spec(data: dict[str, Any], origin: str, base: Path | None = None) -> MixtureSpec:
    """A validated mixture spec from parsed TOML; relative component paths are resolved against `base`."""
    data = dict(data)
    components = data.pop("components", None)
    if not isinstance(components, list) or not components:
        raise SpecError(
            f"{origin}: at least one [[components]] entry is needed (manifest = dataset URL, weight = share)"
        )
    parsed = tuple(_component(c, f"{origin}: components[{i}]", base) for i, c in enumerate(components))
    for i in range(len(parsed)):
        try:
            math.fsum(c.weight for c in parsed[: i + 1])
        except OverflowError:
            raise SpecError(
                f"{origin}: components[{i}].weight: the weights sum past the largest float ({parsed[i].weight!r}); "
                "weights are relative shares: use small numbers such as 0.6 and 0.4"
            ) from None
    budget = data.pop("tokens_per_epoch", None)  # TOML has no null: None is absent
    budgets = {} if budget is None else _budgets(budget, f"{origin}: tokens_per_epoch")
    if "name" not in data:
        raise SpecError(f"{origin}: missing 'name' (the mixture's name: mixtures/<name>.json)")
    spec = spec_record(
        MixtureSpec, {**data, "components": parsed, "tokens_per_epoch": budgets, "origin": origin}, origin
    )
    if not SPEC_NAME.match(spec.name):
        raise SpecError(f"{origin}: name {spec.name!r} must be lowercase letters, digits, '-' or '_'")
    check_choice("stop", spec.stop, STOP_RULES, origin)
    names = [c.name for c in parsed if c.name is not None]
    if len(set(names)) != len(names):
        raise SpecError(f"{origin}: components[].name must be unique, got {names}")
    return spec


def load_mixture_spec(path: str | Path) -> MixtureSpec:
    """Read and validate a mixture spec file."""
    path = Path(path)
    missing = "mixture spec file not found; check --spec or the folder SHARD_MIXTURE_SPECS"
    text = read_user_file(path, str(path), "a mixture spec file", missing, SpecError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML ({exc})") from None
    return parse_mixture_spec(data, str(path), path.resolve().parent)


def mixture_spec_files(folder: str | Path) -> dict[str, Path]:
    """The mixture specs in a folder, by file stem: every `*.toml` but dataset specs (those with [[sources]]), so
    both kinds may share a folder; a file that is not valid TOML is listed, and its error shows when it is used."""
    found = {}
    for path in sorted(Path(folder).glob("*.toml")) if Path(folder).is_dir() else []:
        try:
            if "sources" in tomllib.loads(path.read_text()):
                continue
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            pass
        found[path.stem] = path
    return found
