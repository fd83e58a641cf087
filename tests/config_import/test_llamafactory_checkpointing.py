"""LLaMA-Factory's use_reentrant_gc becomes the scenario's use_reentrant: LLaMA-Factory always passes
gradient_checkpointing_kwargs={"use_reentrant": use_reentrant_gc} (default True) and forces False under FSDP2
(hiyouga/LLaMA-Factory@06d78ff model/model_utils/checkpointing.py prepare_model_for_training)."""

from pathlib import Path

import pytest

from vramfit import estimate, from_config
from vramfit.errors import ScenarioError
from vramfit.estimate import resolve_spec
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.reentrant_fsdp1 import retained_input_grads

FIX = Path(__file__).parent / "fixtures"


def _config(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "llamafactory.yaml"
    p.write_text((FIX / "llamafactory_qlora.yaml").read_text() + extra)
    return p


def _kinds(imp) -> dict[str, str]:
    return {line.split()[0]: line for line in imp.lines()}


def test_unset_is_llamafactorys_explicit_true(tmp_path):
    imp = from_config(_config(tmp_path, ""))
    assert imp.scenario.use_reentrant.value == "yes"
    line = next(x for x in imp.lines() if "use_reentrant_gc" in x)
    assert "use_reentrant=yes" in line and "checkpointing.py" in line


@pytest.mark.parametrize(("value", "want"), [("false", "no"), ("true", "yes")])
def test_the_key_is_read(tmp_path, value, want):
    imp = from_config(_config(tmp_path, f"use_reentrant_gc: {value}\n"))
    assert imp.scenario.use_reentrant.value == want


def test_fsdp2_forces_it_off(tmp_path, accelerate_config):
    cfg = _config(tmp_path, "use_reentrant_gc: true\n")
    assert from_config(cfg, accelerate_config(fsdp_version=2)).scenario.use_reentrant.value == "no"
    assert from_config(cfg, accelerate_config(fsdp_version=1)).scenario.use_reentrant.value == "yes"


def test_checkpointing_off_keeps_the_files_setting(tmp_path):
    """Written back with checkpointing turned on, the file's setting is the one LLaMA-Factory then passes."""
    imp = from_config(_config(tmp_path, "disable_gradient_checkpointing: true\nuse_reentrant_gc: false\n"))
    assert (imp.scenario.gradient_checkpointing.value, imp.scenario.use_reentrant.value) == ("none", "no")


@pytest.mark.parametrize(("key", "value", "shown"), [("use_reentrant_gc", "maybe", "'maybe'"),
                                                   ("use_unsloth_gc", ".nan", "nan"), ("use_unsloth_gc", "[1, 2]", "[1, 2]")])
def test_a_non_boolean_is_one_line(tmp_path, key, value, shown):
    with pytest.raises(ScenarioError) as ei:
        from_config(_config(tmp_path, f"{key}: {value}\n"))
    msg = str(ei.value)
    assert f"{key}: {shown} is not a boolean (valid values: true, false)" in msg and "\n" not in msg


def test_the_estimate_follows_it_under_fsdp1_and_transformers_4(tmp_path, accelerate_config):
    """Under FSDP1 with transformers <= 4.51 (framework_version transformers-4.47) the reentrant default keeps every
    block input's gradient to the end of backward (estimate/reentrant_fsdp1.py): (L - 2) x tokens x hidden x 2 B more."""
    acc = accelerate_config(fsdp_version=1)
    on = from_config(_config(tmp_path, ""), acc).scenario.to_dict()
    off = from_config(_config(tmp_path, "use_reentrant_gc: false\n"), acc).scenario.to_dict()
    for sc in (on, off):
        sc["framework_version"] = "transformers-4.47"
    a, b = estimate(on), estimate(off)
    spec_layers, hidden = 28, 3584  # Qwen2.5-7B
    kept = (spec_layers - 2) * on["micro_batch_size"] * on["seq_len"] * hidden * 2
    for r, want in ((a, kept), (b, 0)):
        _, spec, _, _ = resolve_spec(r.scenario)
        assert retained_input_grads(spec, r.scenario, scenario_profile(r.scenario)) == want
    block = {r: next(p.allocated_bytes for p in r.phases if p.phase == "backward-block") for r in (a, b)}
    assert block[a] > block[b]
    assert any("Reentrant gradient checkpointing under FSDP1" in x for x in a.assumptions)
    assert not any("Reentrant gradient checkpointing under FSDP1" in x for x in b.assumptions)


def test_unsloth_gc_is_checkpoint_offload(tmp_path):
    """use_unsloth_gc runs LLaMA-Factory's UnslothGradientCheckpointing: block inputs on the host (checkpointing.py)."""
    imp = from_config(_config(tmp_path, "use_unsloth_gc: true\n"))
    assert imp.scenario.gradient_checkpointing.value == "offload"
    line = next(x for x in imp.lines() if "use_unsloth_gc" in x)
    assert line.startswith("  not modelled yet") and "gradient_checkpointing=offload" in line
    off = from_config(_config(tmp_path, "use_unsloth_gc: true\ndisable_gradient_checkpointing: true\n"))
    assert off.scenario.gradient_checkpointing.value == "none"
    full = estimate(from_config(_config(tmp_path, "")).scenario.to_dict())
    offload = estimate(imp.scenario.to_dict())
    assert offload.peak.allocated_bytes < full.peak.allocated_bytes
