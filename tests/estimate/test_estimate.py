"""The estimate API end to end: result contract, phases, sharding, errors."""

import json

import pytest

import vramfit
from vramfit import ScenarioError, estimate

MODEL = "meta-llama/Llama-2-7b-hf"


def test_result_object_has_the_contract_names():
    r = estimate(model=MODEL, method="qlora", seq_len=4096, micro_batch_size=2)
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d["peak"]) >= {"allocated_bytes", "reserved_bytes", "device_bytes"}
    assert set(d["model"]) >= {"id", "num_params", "num_trainable_params"}
    assert d["model"]["num_params"] == 6_738_415_616
    assert all(isinstance(c["bytes"], int) and c["phase"] for c in d["components"])
    assert d["assumptions"] and all(isinstance(a, str) for a in d["assumptions"])
    assert d["scenario"]["quantize"] == "nf4-dq"


def test_peak_counters_are_ordered():
    r = estimate(model=MODEL, method="full", num_gpus=4, parallelism="fsdp")
    p = r.peak
    assert 0 < p.allocated_bytes <= p.reserved_bytes < p.device_bytes
    assert p.allocated_bytes == max(x.allocated_bytes for x in r.phases)


def test_peak_is_a_maximum_over_phases_not_a_sum():
    r = estimate(model=MODEL, method="full", precision="bf16-true")
    assert r.peak.allocated_bytes == max(p.allocated_bytes for p in r.phases)
    # every component's largest size, over all phases, is more than any one moment holds
    largest: dict[str, int] = {}
    for p in r.phases:
        for name, b in p.breakdown:
            largest[name] = max(largest.get(name, 0), b)
    assert r.peak.allocated_bytes < sum(largest.values())


def test_a_component_has_one_size_at_the_peak():
    """Issue 11 item 6: Llama 3.1 8B LoRA at 4096 tokens showed logits_loss 4.89 GiB in the
    component table (its forward size) and 5.87 GiB live at the peak (backward-loss)."""
    r = estimate(model="meta-llama/Llama-3.1-8B", method="lora", seq_len=4096)
    TV = 4096 * 128256
    allocated = {c.name: c.bytes for c in r.components if c.counted_in == "allocated"}
    assert r.peak.phase == "backward-loss" and allocated == dict(r.peak.breakdown)
    assert r.component("logits_loss") == 12 * TV  # 5.87 GiB: fp32 log_softmax + two fp32 gradients
    assert sum(allocated.values()) == r.peak.allocated_bytes
    forward = dict(next(p for p in r.phases if p.phase == "forward").breakdown)
    assert forward["logits_loss"] == 10 * TV  # the per-phase view keeps how it changes (4.89 GiB)


def test_optimizer_step_phase_and_optimizer_in_backward():
    normal = estimate(model=MODEL, method="full", seq_len=256)
    phases = {p.phase for p in normal.phases}
    assert "optimizer-step" in phases
    inbwd = estimate(model=MODEL, method="full", seq_len=256, optimizer_in_backward=True)
    assert "optimizer-step" not in {p.phase for p in inbwd.phases}
    assert inbwd.peak.allocated_bytes < normal.peak.allocated_bytes


def test_gradient_accumulation_holds_gradients_during_forward():
    one = {p.phase: p.allocated_bytes for p in estimate(model=MODEL, method="full", seq_len=512).phases}
    acc = {p.phase: p.allocated_bytes for p in estimate(model=MODEL, method="full", seq_len=512, grad_accum=4).phases}
    grads = estimate(model=MODEL, method="full", seq_len=512).component("gradients")
    assert acc["forward"] - one["forward"] == grads


def test_sharding_divides_model_state():
    one = estimate(model=MODEL, method="full", precision="bf16-mixed", num_gpus=8, parallelism="ddp")
    z3 = estimate(model=MODEL, method="full", precision="bf16-mixed", num_gpus=8, parallelism="zero3")
    assert z3.component("optimizer_state") == pytest.approx(one.component("optimizer_state") / 8, rel=1e-3)
    assert z3.peak.allocated_bytes < one.peak.allocated_bytes / 3


def test_offload_puts_optimizer_state_in_host_memory():
    r = estimate(model=MODEL, method="full", precision="bf16-mixed", num_gpus=2, parallelism="zero2", offload="optimizer")
    assert r.component("optimizer_state") == 0
    # fp32 master + Adam moments (12 B/param), the fp32 gradient partition and its 16-bit twin (4 + 2), half of each
    # per GPU, and the pinned staging buffer of the largest parameter, the 32000 x 4096 embedding in bf16
    # (DeepSpeed 0.19.8 stage_1_and_2.py; estimate/ds_offload.py offload_host_gradients)
    assert r.host_bytes == pytest.approx(6_738_415_616 * (12 + 4 + 2) / 2 + 2 * 32000 * 4096, rel=1e-3)


def test_paged_optimizer_counts_in_device_only():
    r = estimate(model=MODEL, method="full", optimizer="paged-adamw-8bit")
    paged = r.component("paged_optimizer_state")
    assert paged > 13e9
    assert r.peak.device_bytes - r.peak.reserved_bytes >= paged


def test_estimator_makes_no_fit_verdicts():
    # fit verdicts are the planner's (vramfit.plan.verdict); the estimator reads no GPU catalog
    r = estimate(model=MODEL, method="qlora", seq_len=512, gradient_checkpointing="full")
    assert r.fits == () and r.to_dict()["fits"] == []


def test_keyword_and_mapping_forms_agree():
    a = estimate(model=MODEL, seq_len=1024)
    b = estimate({"model": MODEL, "seq-len": "1024"})
    assert a.peak == b.peak


def test_generic_params_model_says_so():
    r = estimate(params="7B", method="lora")
    assert r.model.origin == "generic"
    assert any("generic" in a for a in r.assumptions)
    assert r.model.num_params == pytest.approx(7e9, rel=0.02)


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"model": "no-such-org/no-such-model-xyz"}, "model"),
        ({"model": MODEL, "lora_targets": ["qkv_nonsense"]}, "lora_targets"),
        ({"model": MODEL, "seq_len": 0}, "seq_len"),
        ({"params": "-7B"}, "params"),
        ({"params": "lots"}, "params"),
        ({"params": "1e20"}, "params"),
        ({"params": "10T"}, "params"),  # within the count's limit, but the generic shapes round up past MAX_PARAMS
    ],
    ids=["unknown-model", "bad-target", "zero-seq", "negative-params", "garbage-params", "absurd-params",
         "params-rounding-past-the-limit"],
)
def test_user_errors_name_the_field(keys, field, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ScenarioError) as exc:
        estimate(keys)
    assert exc.value.key == field


def test_config_json_path(tmp_path):
    cfg = vramfit.models.resolve_model(MODEL).config
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert estimate(model=str(p)).model.num_params == 6_738_415_616
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match="JSON"):
        estimate(model=str(bad))


def test_import_vramfit_is_light():
    import subprocess
    import sys

    code = "import sys, vramfit; vramfit.estimate(model='meta-llama/Llama-2-7b-hf'); print(sorted(m for m in ('torch','transformers','typer','rich','fastapi','sqlalchemy','huggingface_hub') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_phase_breakdown_sums_to_its_peak():
    for keys in (
        {"model": MODEL, "method": "qlora", "seq_len": 4096},
        {"model": MODEL, "method": "full", "grad_accum": 4, "num_gpus": 4, "parallelism": "fsdp"},
        {"model": MODEL, "method": "lora", "framework": "litgpt", "num_gpus": 2, "parallelism": "fsdp"},
    ):
        r = estimate(keys)
        assert sum(dict(r.peak.breakdown).values()) == r.peak.allocated_bytes
        for p in r.phases:
            assert sum(dict(p.breakdown).values()) == p.allocated_bytes
        assert r.to_dict()["peak"]["breakdown"]


def test_deepspeed_keeps_fp32_master_and_states_for_16_bit_models():
    r = estimate(model=MODEL, method="full", precision="bf16-true", num_gpus=8, parallelism="zero2")
    n = 6_738_415_616
    assert r.component("master_weights") == pytest.approx(4 * n / 8, rel=1e-3)
    assert r.component("optimizer_state") == pytest.approx(8 * n / 8, rel=1e-3)
    assert r.component("weights") == pytest.approx(2 * n, rel=1e-3)
