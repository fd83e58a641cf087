"""Training stages (issue 15): each stage is the SFT step of its policy plus its own contributions."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.params import base_tensors
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.stages.rl import kv_cache_bytes
from vramfit.estimate.step import compute
from vramfit.gpus import get_gpu
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

M = "meta-llama/Llama-3.2-1B"  # 16 layers, 8 KV heads of 64, vocab 128,256, tied embeddings
SPEC = resolve_model(M).spec
V = 128_256
G, S = StepPhase.GENERATE, StepPhase.SCORE
TRAINING = {StepPhase.FORWARD, StepPhase.BACKWARD_LOSS, StepPhase.BACKWARD_BLOCK, StepPhase.BACKWARD_END_TIED,
            StepPhase.OPTIMIZER_STEP}


def step(**keys):
    sc = parse_scenario({"model": M, **keys})
    card = get_gpu(sc.gpu) if sc.gpu else None
    return compute(SPEC, sc, card)


def phases(st) -> dict:
    return {b.phase: dict(b.parts) for b in st.phases}


def test_sft_has_no_stage_phase_and_no_stage_component():
    p = phases(step(method="full"))
    assert G not in p and S not in p
    assert not {"reference_model", "score_logits", "kv_cache", "vllm"} & {n for parts in p.values() for n in parts}


def test_dpo_with_lora_is_sft_of_twice_the_batch_with_no_reference_weights():
    """Fused loss (Liger's LigerFusedLinearDPOLoss under TRL 0.29; TRL 1.16.0 runs none: test_stage_savers.py): the
    loss model is the SFT one, so every training phase is the SFT step of 2 × micro_batch_size exactly; the reference
    pass (adapters disabled) adds only its logits."""
    st = step(stage="dpo", method="lora", micro_batch_size=2, loss="fused", framework_version="trl-0.29")
    dpo = phases(st)
    sft = phases(step(method="lora", micro_batch_size=4, loss="fused", framework_version="trl-0.29"))
    assert {ph: dpo[ph] for ph in sft} == sft
    assert "reference_model" not in dpo[StepPhase.FORWARD]
    # TRL 1.16.0: the policy scores through its fused LM head (whatever the scenario's loss says)
    st = step(stage="dpo", method="lora", micro_batch_size=2, loss="fused")
    dpo = phases(st)
    extra = {k: v - dpo[StepPhase.FORWARD].get(k, 0) for k, v in dpo[S].items()}
    # the reference pass's largest moment: one no_grad block over 4 × 2048 tokens (bf16 residual,
    # normed copy, gate, up, act(gate); intermediate 8192, hidden 2048); the policy's loss is done,
    # down to what it saved (its forward working set freed)
    assert st.loss.saved < st.loss.forward_peak
    assert {k: v for k, v in extra.items() if v} == {"score_logits": 2 * 4 * 2048 * (3 * 8192 + 2 * 2048),
                                                     "logits_loss": st.loss.saved - st.loss.forward_peak}


def test_short_reference_pass_peaks_in_the_fused_head():
    """1 pair of 512 tokens: the fused LM head's masked hidden states (bf16), one [4096, 32768] bf16
    tile (fewer than 4096 tokens: N rows of 32768) and seven fp32 per-token vectors
    (trl/kernels/chunked_logprob.py) beat the block (2 × 1024 × 28672 = 58,720,256)."""
    p = phases(step(stage="dpo", method="lora", seq_len=512))
    N = 2 * 512
    assert p[S]["score_logits"] == 2 * N * 2048 + 2 * N * 32768 + 7 * 4 * N == 71_331_840


def test_dpo_standard_loss_is_the_fused_head_over_the_pairs():
    st = step(stage="dpo", method="lora", micro_batch_size=2)
    N = 2 * 2 * 2048  # pairs × (chosen, rejected) × tokens
    saved = 2 * N * 2048 + 12 * N
    assert st.loss.saved == saved and st.loss.forward_peak == saved + 2 * 4096 * 32768 + 24 * N
    assert st.loss.backward_peak == saved + 6 * N * 2048 + 2 * 4096 * 32768  # frozen lm_head: no weight gradient
    full = step(stage="dpo", method="full", micro_batch_size=2)
    # the fp32 lm_head gradient and its bf16 cast (grad_weight.to(weight.dtype), chunked_logprob.py:457),
    # both alive as the backward returns; the simulator's trace of the TRL step shows them (tests/sim)
    assert full.loss.backward_peak - st.loss.backward_peak == (4 + 2) * V * 2048


def test_orpo_and_simpo_build_the_full_logits():
    """The full bf16 logits (F) stay saved by TRL's log-prob kernel, with the chosen half's log_softmax
    (F / 2); the working set in bytes is in tests/estimate/test_stage_logits.py."""
    for stage in ("orpo", "simpo"):
        st = step(stage=stage, method="lora", micro_batch_size=2)
        T = 2 * 2 * 2048
        assert st.loss.saved == 2 * T * V + T * V + 8 * T, stage


def test_full_dpo_adds_a_frozen_copy_in_the_policys_load_dtype():
    true = step(stage="dpo", method="full", precision="bf16-true")
    copy = sum(round_allocation(t.numel * 2) * t.count for t in base_tensors(SPEC))
    assert copy == true.parts.weights == 2_471_628_800
    for ph, parts in phases(true).items():
        assert parts["reference_model"] == copy, ph
    mixed = step(stage="dpo", method="full", precision="bf16-mixed")  # loaded in fp32: the master copy's size
    assert phases(mixed)[StepPhase.FORWARD]["reference_model"] == mixed.parts.master_weights == 2 * copy


def test_reference_sharded_only_by_zero3_and_fsdp():
    z3 = step(stage="dpo", method="full", num_gpus=8, parallelism="zero3")
    z2 = step(stage="dpo", method="full", num_gpus=8, parallelism="zero2")
    copy = 2_471_628_800
    assert phases(z3)[StepPhase.FORWARD]["reference_model"] == copy // 8
    assert phases(z2)[StepPhase.FORWARD]["reference_model"] == copy


def test_precomputed_reference_and_reference_free_losses_keep_no_reference():
    for keys in ({"stage": "dpo", "reference": "precomputed"}, {"stage": "orpo"}, {"stage": "simpo"}):
        p = phases(step(method="full", **keys))
        assert S not in p and "reference_model" not in p[StepPhase.FORWARD], keys


def test_kto_runs_one_completion_per_example():
    kto, sft = step(stage="kto", method="lora", micro_batch_size=2), step(method="lora", micro_batch_size=2)
    assert kto.acts == sft.acts
    N = 2 * 2048  # two completions, not pairs: the fused head (hidden states, tile, fp32 vectors)
    assert phases(kto)[S]["score_logits"] == 2 * N * 2048 + 2 * 4096 * 32768 + 7 * 4 * N


def test_grpo_kv_cache_is_layers_kv_heads_head_dim_tokens_two_dtype():
    st = step(stage="grpo", method="lora", micro_batch_size=8, grad_accum=2, seq_len=4096, completion_len=3584)
    # per GPU: micro_batch_size × grad_accum = 16 completions of 4096 tokens (prompt + completion);
    # layers × kv_heads × head_dim × tokens × (K, V) × bf16 bytes × sequences
    expected = 16 * 8 * 64 * 4096 * 2 * 2 * 16
    assert kv_cache_bytes(st, 16, 4096) == expected == 2_147_483_648
    gen = phases(st)[G]
    assert gen["kv_cache"] == expected
    # last decode step: one layer's torch.cat copy + bf16 logits, fp32 copy and probabilities of 16 rows
    assert gen["generation_transient"] == expected // 16 + 16 * V * (2 + 4 + 4)
    N = 8 * 3584  # the completion's tokens (the prompt's labels are -100)
    assert st.loss.saved == 2 * N * 2048 + 12 * N


def test_grpo_prefill_dominates_with_long_prompts():
    st = step(stage="grpo", method="lora", micro_batch_size=8, grad_accum=2, completion_len=1024)
    gen = phases(st)[G]
    assert gen["kv_cache"] == 16 * 8 * 64 * 1024 * 2 * 2 * 16  # the prompts' cache
    # one no_grad block over 16 × 1024 prompt tokens: residual, normed copy, gate, up, act(gate)
    assert gen["generation_transient"] == 2 * 16 * 1024 * (3 * 8192 + 2 * 2048)


def test_grpo_default_has_no_reference_and_no_scoring_pass_with_hf_generate():
    p = phases(step(stage="grpo", micro_batch_size=8))
    assert S not in p and "reference_model" not in p[StepPhase.FORWARD]
    beta = phases(step(stage="grpo", method="full", micro_batch_size=8, reference="copy"))
    assert beta[S]["reference_model"] == 2_471_628_800


def test_colocated_vllm_holds_its_share_unless_it_sleeps():
    card = get_gpu("h100")
    share = int(0.3 * card.usable_bytes)
    awake = phases(step(stage="grpo", micro_batch_size=8, generation="vllm-colocate", gpu="h100"))
    assert all(awake[ph]["vllm"] == share for ph in TRAINING & set(awake)) and awake[G]["vllm"] == share
    asleep = phases(step(stage="grpo", micro_batch_size=8, generation="vllm-colocate", gpu="h100", vllm_sleep=True,
                         vllm_gpu_memory_utilization=0.5))
    assert asleep[G]["vllm"] == int(0.5 * card.usable_bytes)
    assert all("vllm" not in asleep[ph] for ph in asleep if ph is not G)
    server = phases(step(stage="grpo", micro_batch_size=8, generation="vllm-server"))
    assert "vllm" not in server[G] and "kv_cache" not in server[G]


def test_ppo_trains_a_full_value_model_and_keeps_a_reward_model():
    ppo = step(stage="ppo", method="lora", micro_batch_size=2)
    full = step(method="full", micro_batch_size=2)
    p = phases(ppo)
    assert p[StepPhase.FORWARD]["value_model"] == full.parts.weights + full.parts.optimizer_state
    assert p[StepPhase.FORWARD]["reward_model"] == full.parts.weights
    assert p[StepPhase.FORWARD]["value_activations"] == full.acts.blocks
    assert p[StepPhase.OPTIMIZER_STEP]["value_gradients"] == full.parts.gradients


def test_ppo_under_zero3_gathers_the_value_model_with_the_policy_for_generation():
    """TRL's unwrap_model_for_generation gathers ``model.parameters()`` of the engine, which wraps
    PolicyAndValueWrapper(policy, value model): both models whole in bf16, less the shard each GPU holds."""
    keys = {"method": "full", "parallelism": "zero3", "num_gpus": 8, "micro_batch_size": 2}
    full = step(method="full", micro_batch_size=2, parallelism="zero3", num_gpus=1).parts.weights
    assert full == SPEC.num_params * 2  # bf16
    one = full - step(stage="grpo", **keys).parts.weights
    assert full - (full + 7) // 8 - 2**20 < one < full - full // 8
    assert phases(step(stage="ppo", **keys))[G]["gathered_weights"] == 2 * one
    assert phases(step(stage="grpo", **keys))[G]["gathered_weights"] == one


def test_zero3_keeps_its_flat_gradient_partition_through_rollouts_and_scoring():
    """DeepSpeed ZeRO-3 allocates grad_partitions_flat_buffer at init (stage3.py _setup_for_real_optimizer): the
    policy's bf16 gradient partition (and PPO's value model's) is held while generating and scoring too."""
    keys = {"method": "full", "parallelism": "zero3", "num_gpus": 8, "micro_batch_size": 2}
    part = (SPEC.num_params * 2 + 7) // 8  # bf16 gradients, one eighth each
    grpo = phases(step(stage="grpo", generation="vllm-server", **keys))
    assert grpo[G]["gradients"] == grpo[S]["gradients"] == grpo[StepPhase.FORWARD]["gradients"] == part
    ppo = phases(step(stage="ppo", **keys))
    assert ppo[G]["value_gradients"] == ppo[S]["value_gradients"] == ppo[StepPhase.FORWARD]["value_gradients"] == part
    assert "gradients" not in phases(step(stage="grpo", generation="vllm-server", method="full", micro_batch_size=8))[G]


@pytest.mark.parametrize(("keys", "message"), [
    ({"num_generations": 4}, "num_generations: is a key of stage grpo, not sft"),
    ({"stage": "orpo", "reference": "copy"}, "reference: stage orpo has no reference model"),
    ({"stage": "dpo", "method": "full", "reference": "adapters-off"}, "reference: adapters-off needs LoRA adapters"),
    ({"stage": "dpo", "reference": "none"}, "reference: dpo's loss needs reference log-probs"),
    ({"stage": "grpo", "reference": "precomputed", "micro_batch_size": 8}, "reference: grpo scores its own"),
    ({"stage": "grpo", "micro_batch_size": 1, "grad_accum": 1}, r"num_generations: must divide the completions per step \(micro_batch_size × num_gpus × "
                        r"grad_accum = 1\), as TRL requires; got 8"),
    ({"stage": "grpo", "micro_batch_size": 8, "seq_len": 256}, "completion_len: must be shorter than seq_len"),
    ({"stage": "dpo", "generation": "vllm-server"}, "generation: is a key of stage grpo, not dpo"),
    ({"stage": "grpo", "micro_batch_size": 8, "vllm_sleep": True}, "vllm_sleep: applies to generation=vllm-colocate"),
])
def test_bad_combinations_name_the_keys(keys, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"model": M, **keys})


def test_colocated_vllm_needs_the_card():
    with pytest.raises(ScenarioError, match="gpu: generation=vllm-colocate takes vllm_gpu_memory_utilization"):
        step(stage="grpo", micro_batch_size=8, generation="vllm-colocate")


def test_replace_stage_drops_the_old_stages_keys():
    sc = parse_scenario({"model": M, "stage": "grpo", "micro_batch_size": 8})
    assert sc.num_generations == 8 and sc.completion_len == 512
    back = sc.replace(stage="sft")
    assert back.num_generations is None and back.completion_len is None


def test_kv_cache_reproduces_unsloths_published_figure():
    """unsloth.ai/blog/grpo (2025-02-20), 'GRPO VRAM Breakdown': Llama 3.1 8B, "Inference KV Cache for
    20K context (GB) 2.5GB" = one sequence of 20 × 1024 tokens, 32 layers × 8 KV heads × 128 × K,V × bf16."""
    spec = resolve_model("meta-llama/Llama-3.1-8B").spec
    st = compute(spec, parse_scenario({"model": "meta-llama/Llama-3.1-8B", "stage": "grpo", "micro_batch_size": 8}))
    assert kv_cache_bytes(st, 1, 20 * 1024) == int(2.5 * 2**30)


def test_measured_stage_rows_are_valid_scenarios_with_a_source():
    import json
    from pathlib import Path

    rows = [json.loads(x) for x in (Path(__file__).resolve().parents[2] / "benchmarks/data/measured/stages.jsonl")
            .read_text().splitlines() if x.strip()]
    assert rows
    for row in rows:
        sc = parse_scenario(row["scenario"])
        assert sc.stage.value != "sft" and row["source"] and isinstance(row["measured"]["bytes"], int)


def test_grpo_without_a_batch_takes_one_prompts_generations_per_step():
    """No micro_batch_size or grad_accum: the least batch TRL accepts, num_generations completions per step
    (what the planner then scales to the effective batch)."""
    from vramfit.scenario import parse_scenario

    assert parse_scenario({"params": "1B", "stage": "grpo"}).grad_accum == 8
    assert parse_scenario({"params": "1B", "stage": "grpo", "num_generations": 4, "num_gpus": 2}).grad_accum == 2


@pytest.mark.parametrize("stage", ["dpo", "kto", "grpo"])
def test_fused_head_stages_hold_no_head_autocast_copy(stage):
    """TRL's fused LM head never calls the output layer: no autocast copy of its weight in any phase (the top
    block's backward used to free a copy never made: -1,050,673,152 B on Llama-3.1-8B QLoRA)."""
    from vramfit import estimate

    r = estimate({"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "stage": stage}).to_dict()
    # only the fp32 adapters' cached bf16 copies (41,943,040 elements) to the end of forward (forward_extras.py
    # autocast_adapter_copies), nothing of the head
    adapters = 2 * 41_943_040
    assert all(p["breakdown"].get("autocast_copies", 0) in (0, adapters) for p in r["phases"])
    assert all(v >= 0 for p in r["phases"] for v in p["breakdown"].values())
    sft = estimate({"model": "meta-llama/Llama-3.1-8B", "method": "qlora"}).to_dict()
    assert sft["phases"][0]["breakdown"]["autocast_copies"] == 2 * 128_256 * 4_096 + adapters  # the SFT head's copy
