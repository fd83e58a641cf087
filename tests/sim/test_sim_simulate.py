"""simulate(): the result contract and the effect of each scenario key, on tiny real architectures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from simconfigs import tiny

from vramfit.errors import ScenarioError
from vramfit.sim import simulate

SEQ = 256


LAYERS = 3


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("llama") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=256, vocab=4096)))
    return str(path)


_CACHE: dict[str, object] = {}


def sim(model: str, **keys):
    """A full-depth simulation (one trace: fast); extrapolation has its own tests."""
    key = json.dumps({"model": model, **keys}, sort_keys=True)
    if key not in _CACHE:
        _CACHE[key] = simulate({"model": model, "seq_len": SEQ, **keys}, layers=LAYERS)
    return _CACHE[key]


def comp(result, name: str) -> int:
    return result.result.component(name)


def test_result_contract(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=6, hidden=256, vocab=4096)))
    r = simulate({"model": str(path), "seq_len": SEQ, "method": "lora"})
    peak = r.result.peak
    allocated = sum(c.bytes for c in r.result.components if c.counted_in == "allocated")
    assert allocated == peak.allocated_bytes
    assert peak.allocated_bytes <= peak.reserved_bytes < peak.device_bytes
    assert r.layers_traced == (3, 4) and r.num_layers == 6 and r.extrapolated
    labels = [label for label, _ in r.timeline]
    assert labels[0] == "after model load" and "it2 optimizer step peak" in labels
    assert max(b for _, b in r.timeline) == peak.allocated_bytes
    data = json.loads(json.dumps(r.to_dict()))
    assert data["peak"]["allocated_bytes"] == peak.allocated_bytes
    assert data["simulation"]["layers_traced"] == [3, 4]
    assert r.top_tensors and r.top_tensors[0].bytes >= r.top_tensors[-1].bytes
    # LoRA r=16 on all 7 linears of 4 layers: r * (in + out) each
    h, i, kv = 256, 512, 128
    per_layer = 16 * ((h + h) + (h + kv) * 2 + (h + h) + (h + i) * 2 + (i + h))
    assert r.result.model.num_trainable_params == 6 * per_layer


@pytest.mark.parametrize("optimizer,bytes_per_param", [
    ("adamw", 4.0), ("sgd", 0.0), ("sgd-momentum", 2.0), ("adamw-8bit", 2.03), ("lion-8bit", 1.02),
    ("adamw-4bit", 1.02),
])
def test_optimizer_state_per_parameter(llama, optimizer, bytes_per_param):
    r = sim(llama, method="full", optimizer=optimizer)
    per_param = comp(r, "optimizer_state") / r.result.model.num_trainable_params
    assert per_param == pytest.approx(bytes_per_param, abs=0.35)


def test_paged_optimizer_state_is_host_memory(llama):
    r = sim(llama, method="full", optimizer="paged-adamw")
    n = r.result.model.num_trainable_params
    assert r.result.host_bytes > 0  # tensors of >= 1e5 elements are paged (embeddings here)
    assert comp(r, "optimizer_state") + r.result.host_bytes == pytest.approx(8 * n, rel=0.02)


def test_checkpointing_saves_memory_and_offload_moves_it_to_the_host(llama):
    none = sim(llama, method="lora", seq_len=1024)
    full = sim(llama, method="lora", seq_len=1024, gradient_checkpointing="full")
    off = sim(llama, method="lora", seq_len=1024, gradient_checkpointing="offload")
    assert full.result.peak.allocated_bytes < none.result.peak.allocated_bytes
    assert off.result.host_bytes > 0 and off.result.peak.allocated_bytes <= full.result.peak.allocated_bytes


def test_selective_checkpointing_drops_eager_attention_scores(llama):
    eager = sim(llama, method="lora", seq_len=1024, attention="eager")
    sel = sim(llama, method="lora", seq_len=1024, attention="eager", gradient_checkpointing="selective")
    assert comp(sel, "activations") < comp(eager, "activations")


def test_attention_implementations(llama):
    sdpa = sim(llama, method="lora", seq_len=1024)
    flash = sim(llama, method="lora", seq_len=1024, attention="flash")
    eager = sim(llama, method="lora", seq_len=1024, attention="eager")
    assert flash.result.peak.allocated_bytes == sdpa.result.peak.allocated_bytes
    assert eager.result.peak.allocated_bytes > sdpa.result.peak.allocated_bytes
    assert any("flash" in a for a in sdpa.result.assumptions)


def test_gradient_accumulation_holds_gradients_between_micro_batches(llama):
    two = sim(llama, method="full", grad_accum=2)
    t = dict(two.timeline)
    assert "it2.mb2 backward peak" in t
    grads = 2 * two.result.model.num_trainable_params  # bf16 gradients held from micro-batch 1
    assert t["it2.mb2 forward peak"] - t["it2.mb1 forward peak"] == pytest.approx(grads, rel=0.1)


def test_loss_modes_shrink_the_logits(llama):
    std = sim(llama, method="lora", seq_len=1024)
    chunked = sim(llama, method="lora", seq_len=1024, loss="chunked")
    fused = sim(llama, method="lora", seq_len=1024, loss="fused")
    assert fused.result.peak.allocated_bytes < chunked.result.peak.allocated_bytes < std.result.peak.allocated_bytes


@pytest.mark.parametrize("precision,weight_bytes", [("bf16-mixed", 4), ("fp16-mixed", 4), ("fp16-true", 2),
                                                    ("fp32", 4)])
def test_every_precision_runs(llama, precision, weight_bytes):
    r = sim(llama, method="full", precision=precision)
    assert comp(r, "weights") == pytest.approx(weight_bytes * r.result.model.num_params, rel=0.01)
    if precision.endswith("mixed"):  # autocast caches 16-bit copies of the trainable weights in forward
        assert dict(r.result.phases[0].breakdown).get("autocast_copies", 0) > 0


def test_qlora_stores_a_quantized_base(llama):
    r = sim(llama, method="qlora", gradient_checkpointing="full")
    assert comp(r, "quantized_base") > 0
    assert any("prepare_model_for_kbit_training" in a for a in r.result.assumptions)


def test_optimizer_in_backward_never_holds_all_gradients(llama):
    normal = dict(sim(llama, method="full").timeline)
    fused = dict(sim(llama, method="full", optimizer_in_backward=True).timeline)
    assert fused["it2.mb1 after backward"] < normal["it2.mb1 after backward"]
    with pytest.raises(ScenarioError, match="grad_accum"):
        simulate({"model": llama, "method": "full", "optimizer_in_backward": True, "grad_accum": 2})


def test_fsdp_full_shard_splits_model_state(llama):
    one = sim(llama, method="full")
    four = sim(llama, method="full", num_gpus=4, parallelism="fsdp")
    assert four.world_size == 4
    assert comp(four, "optimizer_state") == pytest.approx(comp(one, "optimizer_state") / 4, rel=0.05)
    assert four.result.peak.allocated_bytes < one.result.peak.allocated_bytes


def test_unsupported_parallelism_is_a_clear_error(llama):
    """Every parallelism value runs on the simulator now (fsdp-grad-op: sim/fsdp.py; ZeRO++ hpZ:
    sim/deepspeed_zero.py); CPU offload runs under DeepSpeed ZeRO only."""
    with pytest.raises(ScenarioError, match="simulated under DeepSpeed ZeRO only"):
        simulate({"model": llama, "num_gpus": 2, "parallelism": "fsdp", "offload": "optimizer+params"})


def test_layers_argument(llama):
    full = sim(llama, method="lora")
    assert full.layers_traced == (LAYERS,) and not full.extrapolated
    with pytest.raises(ScenarioError, match="layers"):
        simulate({"model": llama, "seq_len": SEQ}, layers=2)


def test_progress_is_reported(llama):
    seen = []
    simulate({"model": llama, "seq_len": 64, "method": "lora"}, layers=LAYERS,
             progress=lambda text, f: seen.append((text, f)))
    assert seen[-1] == ("done", 1.0) and any("backward" in t for t, _ in seen)


def test_import_does_not_import_torch():
    code = "import sys, vramfit.sim; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_render_with_and_without_estimate(llama):
    from rich.console import Console

    from vramfit.estimate import estimate
    from vramfit.sim.render import render_simulation

    r = sim(llama, method="lora")
    for est in (None, estimate(r.result.scenario)):
        console = Console(record=True, width=140)
        render_simulation(r, est, console)
        text = console.export_text()
        assert "Timeline" in text and "Largest tensors" in text
        assert ("estimated GiB" in text) == (est is not None)


def test_a_reentrant_run_is_said_to_be_traced_non_reentrant(llama):
    """use_reentrant (estimate/reentrant_fsdp1.py): the trace runs transformers 5's non-reentrant checkpoint, and says
    so where the run's resolves to reentrant; the same trace either way."""
    plain = sim(llama, method="lora", gradient_checkpointing="full")
    said = sim(llama, method="lora", gradient_checkpointing="full", use_reentrant="yes")
    note = [a for a in said.result.assumptions if "checkpointing is reentrant" in a]
    assert len(note) == 1 and "the estimator's alone" in note[0]
    assert not any("checkpointing is reentrant" in a for a in plain.result.assumptions)
    assert said.result.peak.allocated_bytes == plain.result.peak.allocated_bytes



def test_full_fine_tuning_traces_the_whole_depth_by_default_and_lora_extrapolates(tmp_path):
    """sim/engine.py default_depths: full fine-tuning's reserved figure depends on every layer's gradients and states
    (the six measured full fine-tuning runs: within 3.1 % traced whole, up to +12.3 % extrapolated), so it is traced
    whole up to limits.SIM_DEFAULT_FULL_DEPTH_LAYERS; LoRA keeps the two small depths."""
    from vramfit import limits
    from vramfit.scenario import parse_scenario
    from vramfit.sim.engine import default_depths

    cfg = tiny("meta-llama/Llama-3.2-1B", layers=6, hidden=256, vocab=4096)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    full = parse_scenario({"model": str(path), "method": "full"})
    lora = parse_scenario({"model": str(path), "method": "lora"})
    assert default_depths(full, cfg, 6) == ((6,), (6, 6))
    assert default_depths(lora, cfg, 6)[0] == (3, 4)
    deep = limits.SIM_DEFAULT_FULL_DEPTH_LAYERS + 1
    assert default_depths(full, {**cfg, "num_hidden_layers": deep}, deep)[0] == (3, 4)  # 405B-like depths extrapolate
    r = simulate({"model": str(path), "method": "full", "seq_len": SEQ})
    assert r.layers_traced == (6,) and not r.extrapolated
