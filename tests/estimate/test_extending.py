"""The recipes of docs/extending.md, followed for real: a toy framework profile and a toy model family.
(The training-stage recipe is tests/estimate/test_step.py::test_a_stage_adds_a_contributor_without_editing_the_core.)
Copy one of these when you add the real thing, and replace the toy facts by the ones you model."""

from dataclasses import replace

from vramfit.estimate import estimate_spec, framework
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.step import compute
from vramfit.models import hf_config, resolve_model
from vramfit.scenario import Framework, parse_scenario

MODEL = "meta-llama/Llama-3.1-8B"
T, H = 2048, 4096  # micro_batch_size 1 x seq_len 2048; hidden size


def _sc(**keys):
    return parse_scenario({"model": MODEL, "method": "lora", "seq_len": T, **keys})


def test_recipe_framework_profile(monkeypatch):
    """Recipe 1: a profile is data. This toy runs HF's layout but an RMSNorm in the input dtype
    (as lit-gpt@8641822 does): each norm keeps its bf16 input and fp32 stats, no fp32 copy."""
    toy = replace(framework.PROFILES[Framework.HF], name="toy trainer", rmsnorm_upcast=False)
    spec = resolve_model(MODEL).spec
    hf = compute(spec, _sc())
    monkeypatch.setitem(framework.PROFILES, Framework.HF, toy)  # the real recipe adds a Framework member
    mine = compute(spec, _sc())
    assert "norm1.fp32_in" in hf.saved.items and "norm1.fp32_in" not in mine.saved.items
    assert mine.saved.items["norm1.stats"] == 2 * 4 * T  # fp32 mean and rstd per token
    assert mine.saved.items["block_in"] == 2 * T * H  # the bf16 input itself
    assert mine.profile.name == "toy trainer" and mine.per_layer < hf.per_layer


def test_recipe_model_family(monkeypatch):
    """Recipe 2: a family is a builder that fills the spec's typed facts. This toy is a Llama whose
    attention and MLP run in parallel off one shared norm (as Phi does)."""
    config = dict(resolve_model(MODEL).config)

    def toy_builder(c):
        llama = hf_config.spec_from_hf_config({**c.data, "model_type": "llama"})
        return replace(llama, model_type="toy", parallel_attn_mlp=True, parallel_norms=1)

    monkeypatch.setitem(hf_config._BUILDERS, "toy", toy_builder)  # the real recipe edits _BUILDERS
    toy = hf_config.spec_from_hf_config({**config, "model_type": "toy"})
    llama = resolve_model(MODEL).spec
    assert toy.num_params == llama.num_params  # same weights, different data flow
    saved_toy, saved_llama = compute(toy, _sc()).saved.items, compute(llama, _sc()).saved.items
    # one norm fewer: no second fp32 copy of the residual, no second rstd
    assert set(saved_llama) - set(saved_toy) == {"norm2.fp32_in", "norm2.rstd"}
    diff = compute(llama, _sc()).per_layer - compute(toy, _sc()).per_layer
    assert diff == round_allocation(4 * T * H) + round_allocation(4 * T)
    r = estimate_spec(_sc(), toy, "toy/model", "config")
    assert r.model.id == "toy/model" and r.peak.allocated_bytes < estimate_spec(_sc(), llama, MODEL).peak.allocated_bytes


def test_the_recipes_name_files_and_tests_that_exist():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "extending.md").read_text()
    refs = re.findall(r"`((?:src|tests)/[\w/]+\.py)(?:::(\w+))?`", doc)
    assert len(refs) >= 8
    for path, test in refs:
        text = (root / path).read_text()
        assert not test or f"def {test}(" in text, f"{path}::{test}"
