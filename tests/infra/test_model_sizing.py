"""Issue 44: the plan sizes the model ``model.source`` names (or refuses it), a model too big for
its GPU names what would fit, and the instance catalog plans every type it lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sizing.capacity import CapacityError, estimate, weight_bytes
from sizing.deploy_options import DeployOptions
from sizing.fit_advice import shorter_context, what_would_fit
from sizing.fit_checks import check_deployable, load_config
from tests.fixtures import config_fixture
from typed_config import ConfigError, EngineConfig
from typed_config.catalog import INSTANCE_CATALOG, UNPRICED
from typed_config.model_catalog import KNOWN_MODELS

from .conftest import REPO_ROOT, raw_config

EIGHT_B = "hf://meta-llama/Meta-Llama-3-8B-Instruct"


def _load(tmp_path: Path, raw: dict[str, Any] | str, env: str = "dev"):
    """``raw`` (a config, or a YAML text) written to ``tmp_path/<env>.yaml`` and loaded as synth
    loads it (errors name the file and each field's line)."""
    path = tmp_path / f"{env}.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw, sort_keys=False))
    return load_config(path, env=env)


def _with_source(env: str, source: str) -> str:
    """config/<env>.yaml as committed with only model.source changed."""
    text = (config_fixture(env)).read_text()
    assert text.count(f"source: {EIGHT_B}") == 1
    return text.replace(f"source: {EIGHT_B}", f"source: {source}")


@pytest.mark.parametrize("env", ["dev", "prod"])
@pytest.mark.parametrize("source", sorted(set(KNOWN_MODELS) - {EIGHT_B}))
def test_changing_only_the_source_plans_the_named_model(
    tmp_path: Path, env: str, source: str
) -> None:
    """Every other listed model: its own architecture, never the 8B's; where its GPU cannot
    hold it, synth refuses naming the variant's field."""
    cfg = _load(tmp_path, _with_source(env, source), env)
    assert cfg.architecture == KNOWN_MODELS[source].architecture
    eight_b = KNOWN_MODELS[EIGHT_B].architecture
    same_size = {"max_position_embeddings"}  # Llama-3(.1)-8B: the 8B's weights, longer context
    if cfg.architecture.model_dump(exclude=same_size) != eight_b.model_dump(exclude=same_size):
        assert weight_bytes(cfg.architecture, "awq") != weight_bytes(eight_b, "awq")
    try:
        estimate(cfg, cfg.variants.primary.instance_type)
    except CapacityError:
        with pytest.raises(ConfigError, match=r"variants\.primary\.instance_type \(line \d+\)"):
            check_deployable(cfg)


def test_a_70b_on_dev_names_the_variant_line_figures_and_what_would_fit(tmp_path: Path) -> None:
    cfg = _load(tmp_path, _with_source("dev", "hf://meta-llama/Meta-Llama-3-70B-Instruct"))
    with pytest.raises(ConfigError) as err:
        check_deployable(cfg)
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'dev.yaml'}: 2 invalid value(s)")
    assert "variants.primary.instance_type (line 31)" in text
    line = next(ln for ln in text.splitlines() if "variants.primary.instance_type" in ln)
    assert "ml.g5.xlarge cannot hold hf://meta-llama/Meta-Llama-3-70B-Instruct (awq)" in line
    assert "weights 37.40" in line and "20.2 GiB" in line
    assert "instance_type: ml.p5.48xlarge" in line
    assert "tensor parallelism: ml.g6.12xlarge" in line and "--tensor-parallel-size" in line
    assert "variants.canary.instance_type (line" in text and "either" in text


def test_every_suggestion_fits_by_the_same_capacity_model(tmp_path: Path) -> None:
    cfg = _load(tmp_path, _with_source("dev", "hf://meta-llama/Meta-Llama-3-70B-Instruct"))
    fixes = what_would_fit(cfg, "ml.g5.xlarge")
    types = [t for t in INSTANCE_CATALOG if f"instance_type: {t} " in fixes[0]]
    assert types and all(estimate(cfg, t) for t in types)
    assert estimate(cfg, "ml.g6.12xlarge", tensor_parallel=4).kv_capacity_tokens > 0
    with pytest.raises(CapacityError):
        estimate(cfg, "ml.g6.12xlarge", tensor_parallel=2)  # 18.7 GiB of weights per L4


def test_an_unquantized_model_is_offered_awq_where_that_fits(tmp_path: Path) -> None:
    raw = raw_config("dev")
    raw["model"]["quantization"] = "none"
    raw["variants"]["primary"]["instance_type"] = "ml.g4dn.xlarge"
    cfg = _load(tmp_path, raw)
    fixes = what_would_fit(cfg, "ml.g4dn.xlarge")
    assert any(f.startswith("model.quantization: awq") for f in fixes), fixes


def test_a_short_kv_cache_is_offered_the_longest_context_that_fits(prod_cfg) -> None:
    eng = EngineConfig.model_validate(
        {**prod_cfg.engine.model_dump(), "gpu_memory_utilization": 0.37}
    )
    cfg = prod_cfg.model_copy(update={"engine": eng})
    with pytest.raises(CapacityError, match="fewer than one sequence"):
        estimate(cfg, "ml.g5.xlarge")
    offer = shorter_context(cfg, "ml.g5.xlarge")
    assert offer is not None
    length = int(offer.split()[1])

    def at(n: int):
        e = EngineConfig.model_validate({**eng.model_dump(), "max_model_len": n})
        return estimate(cfg.model_copy(update={"engine": e}), "ml.g5.xlarge")

    assert at(length).kv_capacity_tokens >= length
    with pytest.raises(CapacityError):
        at(length + eng.block_size)


def test_a_source_the_product_cannot_size_is_refused_naming_the_field_and_both_ways(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _with_source("dev", "hf://acme/mystery-13b"))
    text = str(err.value)
    assert "model.source (line 9): hf://acme/mystery-13b: the product cannot establish" in text
    assert "model.architecture_file" in text and "typed_config/model_catalog.py" in text


def test_an_architecture_written_beside_the_source_is_refused(tmp_path: Path) -> None:
    raw = raw_config("dev")
    raw["model"]["architecture"] = KNOWN_MODELS[EIGHT_B].config
    with pytest.raises(ConfigError, match=r"model\.architecture \(line \d+\): an architecture"):
        _load(tmp_path, raw)


def test_an_architecture_file_of_another_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(KNOWN_MODELS[EIGHT_B].config))
    raw = yaml.safe_load(_with_source("dev", "hf://meta-llama/Meta-Llama-3-70B-Instruct"))
    raw["model"]["architecture_file"] = "config.json"
    with pytest.raises(ConfigError, match=r"model\.architecture_file \(line \d+\): does not"):
        _load(tmp_path, raw)


def test_a_local_source_is_sized_from_its_own_config_json(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    config = {**KNOWN_MODELS[EIGHT_B].config, "num_hidden_layers": 16}
    (model / "config.json").write_text(json.dumps(config))
    cfg = _load(tmp_path, _with_source("dev", f"local://{model}"))
    assert cfg.architecture.num_hidden_layers == 16
    with pytest.raises(ConfigError, match=r"model\.source \(line 9\)"):
        _load(tmp_path, _with_source("dev", f"local://{tmp_path / 'nothing-here'}"))


def test_ml_g6e_2xlarge_plans(tmp_path: Path) -> None:
    raw = raw_config("prod")
    for v in ("primary", "canary"):
        raw["variants"][v]["instance_type"] = "ml.g6e.2xlarge"
    cfg = _load(tmp_path, raw, "prod")
    check_deployable(cfg)
    cap = estimate(cfg, "ml.g6e.2xlarge")
    assert cap.kv_capacity_tokens == estimate(cfg, "ml.g6e.xlarge").kv_capacity_tokens
    assert INSTANCE_CATALOG["ml.g6e.2xlarge"].price_per_hour == 2.8026


def test_the_catalog_covers_the_families_single_and_multi_gpu_with_sources() -> None:
    for family in ("g5", "g6", "g6e", "p4d", "p5"):
        counts = {i.gpu_count for n, i in INSTANCE_CATALOG.items() if n.split(".")[1] == family}
        assert counts, family
    for family in ("g5", "g6", "g6e"):
        counts = {i.gpu_count for n, i in INSTANCE_CATALOG.items() if n.split(".")[1] == family}
        assert 1 in counts and max(counts) > 1, family
    for inst in INSTANCE_CATALOG.values():
        assert inst.price_source and inst.hardware_source and inst.cuda_memory_source
        assert inst.vcpus >= 4 and inst.ram_gib >= 16
    assert not set(UNPRICED) & set(INSTANCE_CATALOG)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("ml.g6e.2xlarg", "closest: ml.g6e.2xlarge"),
        ("ml.g6e.4xlarge", "has no us-east-1 SageMaker hosting price on record"),
        ("ml.x9.huge", "to plan another, add it to typed_config/catalog.py"),
    ],
)
def test_a_type_not_listed_names_the_closest_and_how_to_add_one(
    tmp_path: Path, given: str, says: str
) -> None:
    raw = raw_config("dev")
    raw["variants"]["primary"]["instance_type"] = given
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, raw)
    assert "variants.primary.instance_type (line" in str(err.value)
    assert says in str(err.value)


def test_the_capacity_page_quotes_the_refusal_as_synth_prints_it(tmp_path: Path) -> None:
    """docs/capacity.md shows dev with only its source changed to a 70B: the quoted line (up to
    its "...") is the start of what synth prints."""
    doc = (REPO_ROOT / "docs" / "capacity.md").read_text()
    quoted = next(ln for ln in doc.splitlines() if ln.startswith("variants.primary.instance_type"))
    cfg = _load(tmp_path, _with_source("dev", "hf://meta-llama/Meta-Llama-3-70B-Instruct"))
    with pytest.raises(ConfigError) as err:
        check_deployable(cfg)
    printed = next(ln.strip() for ln in str(err.value).splitlines() if "variants.primary" in ln)
    assert printed.startswith(quoted.removesuffix(", ...")), (quoted, printed)


def test_a_pinned_type_not_listed_names_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"primary=ml\.g6e\.2xlarg: .*closest: ml\.g6e\.2xlarge"):
        DeployOptions(pin_instance_types={"primary": "ml.g6e.2xlarg"})
