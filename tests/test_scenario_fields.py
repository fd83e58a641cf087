"""One scenario field table (vramfit.scenario.FIELDS) from which the CLI options, the web schema, the
web labels and docs/scenario-reference.md are derived: they cannot diverge."""

import re
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit.scenario import (
    CHOICE_KEYS,
    FIELD,
    FIELDS,
    INT_LIMITS,
    SCENARIO_KEYS,
    Kind,
    Scenario,
    parse_scenario,
)
from vramfit.scenario_doc import markdown

ROOT = Path(__file__).resolve().parent.parent


def test_the_table_is_the_scenario():
    assert tuple(f.name for f in FIELDS) == SCENARIO_KEYS == tuple(f.name for f in fields(Scenario))
    for dc in fields(Scenario):
        assert FIELD[dc.name].default == dc.default
    assert set(CHOICE_KEYS) == {f.name for f in FIELDS if f.kind is Kind.CHOICE}
    assert INT_LIMITS["seq_len"] == (1, 10_000_000) and INT_LIMITS["lora_rank"] == (1, 65_536)


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_every_key_has_help_labels_and_a_default(f):
    assert f.help.endswith(".") and len(f.help) > 15
    assert all(f.label) and len(f.label) == 2
    assert f.default_text()
    if f.kind is Kind.CHOICE:
        assert f.valid == [m.value for m in f.choices]
        assert f.default_note or f.default_text() in f.valid


#: keys that exist only within a stage, with the keys that make their largest value valid
_STAGE_CONTEXT = {
    "num_generations": {"stage": "grpo", "micro_batch_size": 1_000_000},
    "completion_len": {"stage": "grpo", "seq_len": 10_000_000, "num_generations": 2, "micro_batch_size": 2},
    "num_nodes": {"num_gpus": 100_000, "parallelism": "fsdp"},  # nodes divide the GPUs
    # model-parallel degrees divide the GPUs, on torchtitan full fine-tuning (context parallel 100,000 ranks: 2 x cp
    # tokens for its load balancing, 8 chunks per rank for torchtitan 0.3's chunked loss)
    **{k: {"num_gpus": 100_000, "parallelism": "fsdp", "framework": "torchtitan", "method": "full", "seq_len": 800_000}
       for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel")},
    "pipeline_parallel": {"num_gpus": 100_000, "parallelism": "fsdp", "framework": "torchtitan", "method": "full",
                          "grad_accum": 100_000},  # 1F1B: at least as many micro-batches as stages
    "pipeline_virtual_stages": {"pipeline_parallel": 2, "pipeline_schedule": "interleaved-1f1b", "num_gpus": 2,
                                "parallelism": "fsdp", "framework": "torchtitan", "method": "full"},
}


def test_the_limits_in_the_table_are_the_ones_enforced():
    for key, (lo, hi) in INT_LIMITS.items():
        ctx = _STAGE_CONTEXT.get(key, {})
        parse_scenario({"params": "7B", **ctx, key: hi})
        with pytest.raises(Exception, match=f"{key}: must be from {lo} to {hi}"):
            parse_scenario({"params": "7B", **ctx, key: hi + 1})


def test_docs_reference_is_generated_from_the_table():
    doc = (ROOT / "docs" / "scenario-reference.md").read_text(encoding="utf-8")
    assert doc == markdown(), "regenerate: python -m vramfit.scenario_doc > docs/scenario-reference.md"
    for f in FIELDS:
        assert f"| `{f.name}` | {f.kind.value} |" in doc


def test_cli_help_shows_type_values_and_default_from_the_table():
    from vramfit.cli.main import app

    out = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "1200"}).output
    lines = {m.group(1): m.group(0) for m in re.finditer(r"--([a-z-]+)\s+(\S+)\s+.*", out)}
    for f in FIELDS:
        line = lines[f.name.replace("_", "-")]
        assert f.help in line, f.name
        assert f"[default: ({f.default_text()})]" in line, f.name
        metavar = line.split()[1]
        assert metavar == {Kind.CHOICE: "CHOICE", Kind.INTEGER: "INTEGER", Kind.NUMBER: "NUMBER",
                           Kind.BOOLEAN: "true|false", Kind.TEXT: "TEXT", Kind.COUNT: "COUNT",
                           Kind.NAMES: "NAMES"}[f.kind]
        if f.kind is Kind.CHOICE:
            assert "One of: " + ", ".join(f.valid) + "." in line
        if f.range_text():
            assert f"Range: {f.range_text()}" in line


def test_web_schema_and_labels_come_from_the_table():
    pytest.importorskip("fastapi", reason="the web extra (fastapi) is not installed")
    from vramfit.web.i18n import strings
    from vramfit.web.schemas import ScenarioIn

    schema = ScenarioIn.model_json_schema()["properties"]
    en, pt = strings("en"), strings("pt")
    for f in FIELDS:
        assert schema[f.name]["description"].startswith(f.help), f.name
        assert f"Default: {f.default_text()}." in schema[f.name]["description"]
        assert (en[f"k.{f.name}"], pt[f"k.{f.name}"]) == f.label
        if f.kind is Kind.CHOICE:
            enum = next(x["enum"] for x in schema[f.name]["anyOf"] if "enum" in x)
            assert enum == f.valid


def test_faces_import_no_private_names():
    src = ROOT / "src" / "vramfit"
    for path in [*(src / "cli").glob("*.py"), *(src / "web").glob("*.py"), *(src / "plan").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for name in ("_ENUM_KEYS", "_INT_LIMITS", "estimate_spec as _"):
            assert name not in text, f"{path.name} uses {name}"
