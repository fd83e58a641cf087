"""torchtitan and Unsloth profiles: the exact tensors their code keeps (issue 13)."""

import json

from vramfit.estimate import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.block_extras import op_sac_saved
from vramfit.estimate.framework import runs_under_autocast
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

MODEL = "meta-llama/Llama-3.1-8B"
SPEC = resolve_model(MODEL).spec
T, H, W, L = 4096, 4096, 14336, 32  # micro_batch_size 1 x seq_len 4096; hidden; MLP width; layers
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _titan(**keys):
    return parse_scenario({"model": MODEL, "framework": "torchtitan", "method": "full", "seq_len": T,
                           "attention": "flash", "num_gpus": 8, "parallelism": "fsdp", **keys})


def _unsloth(framework="unsloth", **keys):
    return parse_scenario({"model": MODEL, "framework": framework, "method": "qlora", "seq_len": T, "lora_rank": 32,
                           "lora_targets": ALL, "attention": "flash", **keys})


def test_torchtitan_mixed_precision_is_a_param_cast_not_autocast():
    sc = _titan()
    assert sc.precision.value == "bf16-mixed"  # the profile's default: fp32 shards, bf16 all-gather
    step = compute(SPEC, sc)
    assert not runs_under_autocast(sc, step.profile)
    # the residual stream is bf16: the first norm's fp32 upcast is a new tensor, the block input bf16
    assert step.saved.items["norm1.fp32_in"] == 4 * T * H
    full = compute(SPEC, _titan(gradient_checkpointing="full"))
    assert full.acts.blocks == L * round_allocation(2 * T * H)  # checkpointed block inputs are bf16
    # (HF under DDP: under FSDP accelerate casts the parameters too, as the simulator confirms)
    hf = compute(SPEC, parse_scenario({**sc.to_dict(), "framework": "hf", "parallelism": "ddp"}))
    assert "q_proj.autocast_in" in hf.saved.items and "q_proj.autocast_in" not in step.saved.items
    # and the result says so: no "autocast copies" line for torchtitan, the HF run keeps its own
    said = [a for a in estimate(sc).assumptions if a.startswith("Mixed precision")]
    assert said == ["Mixed precision: FSDP's policy casts the weights to 16 bits as it gathers them, no autocast: "
                    "16-bit activations; fp32 only in the kept weights, gradients and optimizer states."]
    hf_said = [a for a in estimate(parse_scenario({**sc.to_dict(), "framework": "hf", "parallelism": "ddp"})).assumptions
               if a.startswith("Mixed precision")]
    assert hf_said == ["Mixed precision: fp32 weights with 16-bit autocast copies kept for backward."]


def test_op_sac_keeps_every_second_matmul_and_the_attention_output():
    sc = _titan(gradient_checkpointing="selective-op")
    # q (1st), v (3rd), gate (5th), down (7th) outputs; SDPA output and its fp32 log-sum-exp (32 heads)
    kept = [2 * T * 4096, 2 * T * 1024, 2 * T * W, 2 * T * H, 2 * T * 4096, 4 * T * 32]
    assert op_sac_saved(SPEC, sc, compute(SPEC, sc).profile) == sum(round_allocation(b) for b in kept)
    step = compute(SPEC, sc)
    assert step.acts.blocks == L * (round_allocation(2 * T * H) + sum(round_allocation(b) for b in kept))
    full = compute(SPEC, _titan(gradient_checkpointing="full")).acts.blocks
    none = compute(SPEC, _titan(gradient_checkpointing="none")).acts.blocks
    assert full < step.acts.blocks < none


def test_torchtitan_compiles_blocks_and_the_loss_but_9dec370_not_the_loss():
    """torchtitan compiles the loss from bbb1b616e (2025-04-02; compile.components ["model", "loss"] in v0.2.2 and
    v0.3.0): v0.2.2's whole-logits loss saves its input, the bf16 logits, and the per-token logsumexp, no fp32 copy;
    9dec370 (torchtitan-2024) kept it eager. (v0.3.0's chunked loss: tests/estimate/test_titan_chunked_loss.py.)"""
    titan = [compute(SPEC, _titan(compile=c, framework_version="torchtitan-0.2.2")) for c in (False, True)]
    tokens, vocab = T, SPEC.vocab_size
    assert titan[1].loss.saved == 2 * tokens * vocab + 4 * tokens < titan[0].loss.saved
    assert titan[1].acts.blocks < titan[0].acts.blocks  # the blocks are compiled
    old = [compute(SPEC, parse_scenario({**_titan(compile=c).to_dict(), "framework_version": "torchtitan-2024"}))
           for c in (False, True)]
    assert old[0].loss == old[1].loss == titan[0].loss  # the loss stays eager
    assert old[1].acts.blocks < old[0].acts.blocks
    tune = [compute(SPEC, parse_scenario({**_titan(compile=c).to_dict(), "framework": "torchtune", "loss": "chunked"})).loss
            for c in (False, True)]
    assert tune[0] != tune[1]  # torchtune's compile covers the (chunked) loss


def test_unsloth_lora_functions_save_only_their_inputs():
    step, hf = compute(SPEC, _unsloth()), compute(SPEC, _unsloth("hf"))
    keys = set(step.saved.items)
    # LoRA_MLP saves X, e, g; LoRA_QKV X; LoRA_W X (fast_lora.py)
    assert {"mlp_in", "mlp.gate_out", "mlp.up_out", "attn_in", "attn.out"} <= keys
    assert step.saved.items["mlp.gate_out"] == step.saved.items["mlp.up_out"] == 2 * T * W
    assert "mlp.act_out" in hf.saved.items and "mlp.act_out" not in keys
    assert any(k.startswith("down_proj.lora") for k in hf.saved.items)  # PEFT keeps lora_A's output
    assert not [k for k in keys if ".lora" in k]  # lora_A's output is recomputed
    # the Triton RMSNorm keeps its bf16 input and the fp32 rstd; no fp32 copy, no fp32 residual
    assert step.saved.items["block_in"] == 2 * T * H and step.saved.items["norm1.rstd"] == 4 * T
    assert "norm1.fp32_in" not in keys
    lora = sum(32 * (a.in_features + a.out_features) * a.per_layer * L for a in step.adapters)
    assert step.parts.adapters == 4 * lora  # fp32 LoRA weights, 16-bit everything else


def test_unsloth_loss_keeps_no_logits_and_offload_keeps_five_block_inputs():
    step = compute(SPEC, _unsloth(gradient_checkpointing="offload"))
    assert step.loss.saved == step.loss.forward_peak == 2 * T * H  # the hidden states' gradient
    block_in = round_allocation(2 * T * H)
    assert step.acts.blocks == 5 * block_in and step.acts.host == L * block_in
    hf = compute(SPEC, _unsloth("hf", gradient_checkpointing="offload"))
    assert hf.acts.blocks == 2 * round_allocation(4 * T * H)  # fp32 residual (prepare_model_for_kbit_training)


def test_selective_op_recomputes_between_selective_and_full():
    from vramfit.plan.throughput import model_flops, recompute_flops_per_token
    from vramfit.scenario import Checkpointing

    mf = model_flops(SPEC, T)
    sel, op, full = (recompute_flops_per_token(mf, c) for c in
                     (Checkpointing.SELECTIVE, Checkpointing.SELECTIVE_OP, Checkpointing.FULL))
    assert sel < op < full and op == mf.matmul_params - mf.lm_head_params


def test_the_simulator_refuses_what_it_cannot_run():
    import pytest

    from vramfit.errors import ScenarioError
    from vramfit.measure.build import check_measurable
    from vramfit.sim.build import _check_supported

    for refuse in (_check_supported, check_measurable):
        for key, value in (("framework", "unsloth"), ("gradient_checkpointing", "selective-op")):
            with pytest.raises(ScenarioError) as err:
                refuse(parse_scenario({"model": MODEL, key: value}))
            assert err.value.key == key
    with pytest.raises(ScenarioError) as err:  # the simulator runs torchtitan's full fine-tuning (tests/sim/test_sim_titan.py)
        _check_supported(parse_scenario({"model": MODEL, "framework": "torchtitan", "method": "lora"}))
    assert err.value.key == "method"
    with pytest.raises(ScenarioError) as err:  # ... which vramfit measure does not run
        check_measurable(parse_scenario({"model": MODEL, "framework": "torchtitan"}))
    assert err.value.key == "framework"


def test_cli_and_api_take_the_new_keys_and_name_the_valid_values():
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from vramfit.cli.main import app
    from vramfit.web.app import create_app

    res = CliRunner().invoke(app, ["estimate", "--model", MODEL, "--framework", "unslot"])
    assert res.exit_code == 2 and "hf, torchtune, litgpt, torchtitan, unsloth" in res.output
    res = CliRunner().invoke(app, ["estimate", "--model", MODEL, "--framework", "torchtitan", "--method", "full",
                                   "--gradient-checkpointing", "selective-op", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["scenario"]["gradient_checkpointing"] == "selective-op"
    client = TestClient(create_app(), base_url="http://localhost")
    body = {"model": MODEL, "framework": "unsloth", "method": "qlora", "gradient_checkpointing": "offload"}
    want = estimate(parse_scenario(body)).peak.device_bytes
    assert client.post("/api/estimate", json=body).json()["peak"]["device_bytes"] == want
    assert client.post("/api/estimate", json={**body, "gradient_checkpointing": "op"}).status_code == 422


def test_the_planner_keeps_a_selective_op_base_among_its_settings():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    res = CliRunner().invoke(app, ["plan", "--model", MODEL, "--framework", "torchtitan", "--method", "full",
                                   "--gradient-checkpointing", "selective-op", "--seq-len", "8192", "--json"])
    assert res.exit_code == 0, res.output
    plans = json.loads(res.output)["plans"]
    assert plans and "selective-op" in {p["gradient_checkpointing"] for p in plans}


def test_one_rank_per_shard_says_which_torchtitan_release_it_counts():
    """torchtitan 0.3 applies FSDP2 at every degree; 9dec370 and v0.2.2 only over more than one shard (profile
    one_shard_note): the line appears where the shard group is one rank, and nowhere else."""
    def said(**keys):
        sc = parse_scenario({"model": MODEL, "method": "full", "framework": "torchtitan", **keys})
        return any(a.startswith("torchtitan with one rank per shard") for a in estimate(sc).assumptions)

    assert said() and said(num_gpus=8, parallelism="ddp")
    assert said(num_gpus=8, parallelism="fsdp", tensor_parallel=8)  # TP alone: dp_shard 1
    assert not said(num_gpus=8, parallelism="fsdp") and not said(num_gpus=8, parallelism="fsdp", tensor_parallel=4)
    hf = parse_scenario({"model": MODEL, "method": "full"})
    assert not any(a.startswith("torchtitan with one rank") for a in estimate(hf).assumptions)


def test_the_one_shard_line_is_about_mixed_precision_only():
    """fp32 and bf16-true have no cast to speak of: no line (it said 'counted with FSDP2's bf16 cast' for fp32)."""
    for precision in ("fp32", "bf16-true"):
        sc = parse_scenario({"model": MODEL, "method": "full", "framework": "torchtitan", "precision": precision})
        assert not any(a.startswith("torchtitan with one rank per shard") for a in estimate(sc).assumptions)
