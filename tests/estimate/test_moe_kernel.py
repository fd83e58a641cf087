"""The experts path of a mixture-of-experts block (scenario key moe_kernel, estimate/moe_kernel.py) and the HF
stack's activation offload (TRL's OffloadActivations)."""

import pytest
from typer.testing import CliRunner

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.block_extras import block_input_bytes
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

GPT_OSS = resolve_model("openai/gpt-oss-20b").spec
H, W, E = 2880, 2880, 32  # gpt-oss-20b hidden, expert width, experts
# one expert's gate_up (H x 2W) and down (W x H) weights, bf16 (its bias rows' copies feed an add, which keeps nothing)
EXPERT_COPY = 2 * (H * 2 * W + W * H)
# the zero-filled gate_up bank of one IndexBackward0 plus the expert's own (1, H, 2W) gradient, bf16
ZERO_BANK = 2 * (E * H * 2 * W + H * 2 * W)


def _full(**keys):
    """AXOLOTL_EX_2508-3's shape (found.jsonl): gpt-oss-20b full fine-tuning, FSDP on 8 GPUs, transformers 4.55."""
    return parse_scenario({"model": "openai/gpt-oss-20b", "method": "full", "precision": "bf16-true",
                           "optimizer": "adamw-8bit", "micro_batch_size": 1, "seq_len": 4096, "grad_accum": 2,
                           "gradient_checkpointing": "offload", "attention": "flash", "loss": "fused",
                           "num_gpus": 8, "parallelism": "fsdp", "framework": "hf",
                           "framework_version": "transformers-4.55", "fsdp_version": "2", **keys})


def test_the_v4_loop_keeps_a_copy_of_every_expert_hit():
    loop, kernel = compute(GPT_OSS, _full()), compute(GPT_OSS, _full(moe_kernel="megablocks"))
    assert loop.saved.items["experts.weight_copies"] == E * EXPERT_COPY == 1_592_524_800
    assert "experts.weight_copies" not in kernel.saved.items
    assert loop.block_transient == ZERO_BANK == 1_094_860_800
    assert kernel.block_transient == 270 * 2**20  # the grouped path's MLP working set, 3 x (4 x 4096, 2880) bf16
    # the peak (a block's backward, under the row's FSDP2) gains the copies of the recomputed block and the zero bank;
    # under FSDP1's no_sync the top block's whole gradients beside their cat, past its recompute, peak higher
    # (estimate/step_grads.py _gradient_timing; the test pinned FSDP1 here until 2026-12-06)
    a, b = estimate(_full()), estimate(_full(moe_kernel="megablocks"))
    assert a.peak.phase == b.peak.phase == "backward-block"
    assert a.peak.allocated_bytes - b.peak.allocated_bytes == E * EXPERT_COPY + ZERO_BANK - 270 * 2**20


def test_a_short_micro_batch_reaches_fewer_experts():
    # top-4 of 4 tokens: at most 16 of the 32 experts are hit
    assert compute(GPT_OSS, _full(seq_len=4)).saved.items["experts.weight_copies"] == 16 * EXPERT_COPY


def test_lora_keeps_the_copies_but_makes_no_bank_gradient():
    sc = _full(method="lora", lora_rank=8, num_gpus=1, parallelism="none")
    step = compute(GPT_OSS, sc)
    assert step.saved.items["experts.weight_copies"] == E * EXPERT_COPY
    assert step.block_transient == 270 * 2**20


def test_transformers_5_runs_grouped_mm_whatever_the_key_says():
    new = _full(framework_version=None)
    assert "experts.weight_copies" not in compute(GPT_OSS, new).saved.items
    assert estimate(new).peak == estimate(_full(framework_version=None, moe_kernel="megablocks")).peak


def test_the_assumptions_say_which_experts_path_ran():
    assert any("a copy per expert kept for backward" in a for a in estimate(_full()).assumptions)
    assert any("MegaBlocksMoeMLP (tokens binned" in a for a in estimate(_full(moe_kernel="megablocks")).assumptions)
    dense = estimate({"model": "meta-llama/Llama-3.1-8B", "moe_kernel": "megablocks"})
    assert not any(a.startswith("MoE experts") for a in dense.assumptions)


def test_a_bad_value_is_one_line_naming_the_key():
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"model": "openai/gpt-oss-20b", "moe_kernel": "triton"})
    assert str(e.value) == "moe_kernel: unknown value 'triton' (valid values: none, megablocks)"
    from vramfit.cli.main import app

    res = CliRunner().invoke(app, ["estimate", "--model", "openai/gpt-oss-20b", "--moe-kernel", "triton"])
    assert res.exit_code == 2 and "moe_kernel" in res.output and "Traceback" not in res.output


def test_offload_under_transformers_4_55_is_trls_offload_activations():
    # 4.55 has no activation_checkpointing_enable(offload=True): TRL's OffloadActivations (trl v0.20.0) brings one
    # block input back when its backward unpacks it, no prefetch; v5.24's save_on_cpu keeps two (the profile's default)
    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "seq_len": 2048, "gradient_checkpointing": "offload"}
    old, new = (compute(resolve_model(keys["model"]).spec, parse_scenario({**keys, **v}))
                for v in ({"framework_version": "transformers-4.55"}, {}))
    one = block_input_bytes(old.spec, old.sc, old.profile)
    assert one == 2 * 2048 * 4096
    assert (old.acts.blocks, old.acts.lowest, old.acts.host) == (one, one, 32 * one)
    assert (new.acts.blocks, new.acts.lowest) == (2 * one, one)
    assert any("brought back when its block's backward runs" in a
               for a in estimate({**keys, "framework_version": "transformers-4.55"}).assumptions)
    assert any("prefetched one block ahead" in a for a in estimate(keys).assumptions)


def test_the_simulator_refuses_the_hub_kernel_in_one_line():
    from vramfit.sim import simulate

    with pytest.raises(ScenarioError) as e:
        simulate({"model": "openai/gpt-oss-20b", "method": "full", "moe_kernel": "megablocks"})
    assert str(e.value).startswith("moe_kernel: kernels-community/megablocks runs compiled CUDA ops")
