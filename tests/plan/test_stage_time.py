"""Time of the preference/RL stages' extra passes and of a vision-language model's images (plan/stage_work.py)."""

from __future__ import annotations

import dataclasses

import pytest

from vramfit.choices import Method
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.stage_work import (
    PPO_EPOCHS,
    no_grad_forwards,
    scenario_flops,
    stage_time_note,
    tower_flops_per_sequence,
)
from vramfit.plan.throughput import held_param_bytes, sft_work, step_work
from vramfit.plan.timing import scenario_speed

BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "seq_len": 1024, "micro_batch_size": 4,
        "grad_accum": 4}


def _work(**kw):
    ev = Evaluator({**BASE, **kw})
    sc, mf = ev.base, scenario_flops(ev.spec, ev.base)
    return sc, mf, step_work(sc, mf, ev.estimate().model.num_trainable_params), ev


def _fwd_flops(mf, tokens):
    """FLOPs of a no-grad forward over ``tokens`` as the MFU model counts them: 2 N_mm + A per token."""
    return tokens * (2 * mf.matmul_params + mf.attn_flops_per_token_fwd)


def test_dpo_trains_both_halves_and_runs_the_reference_forward():
    sc, mf, w, ev = _work(stage="dpo")
    sft2 = sft_work(dataclasses.replace(sc, micro_batch_size=2 * sc.micro_batch_size), mf,
                    ev.estimate().model.num_trainable_params)
    pairs = sc.micro_batch_size * sc.grad_accum
    assert w.tokens_per_step == pairs * sc.seq_len  # one sequence per pair, as a dataset's rows count them
    assert w.flops == pytest.approx(sft2.flops + _fwd_flops(mf, 2 * pairs * sc.seq_len))
    assert w.forward_passes == sc.grad_accum  # one reference forward per micro-batch (adapters off: LoRA)
    # QLoRA: the reference forward de-quantizes the 4-bit weights once more per micro-batch
    _, mfq, wq, evq = _work(stage="dpo", method="qlora")
    sftq = _work(method="qlora", micro_batch_size=8)[2]
    assert wq.dequant_bytes - sftq.dequant_bytes == pytest.approx(sc.grad_accum * mfq.quantizable_params * 2.5)


@pytest.mark.parametrize("kw", [{"stage": "dpo", "reference": "precomputed"}, {"stage": "orpo"}, {"stage": "simpo"}])
def test_reference_free_or_precomputed_adds_no_forward(kw):
    sc, mf, w, ev = _work(**kw)
    sft2 = _work(micro_batch_size=8)[2]
    assert no_grad_forwards(sc) == 0 and w.forward_passes == 0
    assert w.flops == pytest.approx(sft2.flops) and w.tokens_per_step == sft2.tokens_per_step // 2


def test_kto_runs_the_kl_forward_and_two_reference_forwards():
    sc, mf, w, ev = _work(stage="kto")
    sft = _work()[2]
    assert no_grad_forwards(sc) == 3  # policy's KL batch, the reference on the completions and on the KL batch
    assert w.tokens_per_step == sft.tokens_per_step  # one completion per example
    assert w.flops - sft.flops == pytest.approx(_fwd_flops(mf, 3 * sc.micro_batch_size * sc.grad_accum * sc.seq_len))


def test_timed_steps_rank_as_the_passes_say():
    t = {k: scenario_speed({**BASE, **kw}, "h100-sxm").step_s for k, kw in {
        "sft": {}, "sft2": {"micro_batch_size": 8}, "dpo": {"stage": "dpo"}, "orpo": {"stage": "orpo"},
        "kto": {"stage": "kto"}}.items()}
    assert t["orpo"] == pytest.approx(t["sft2"])  # the concatenated batch, nothing else
    # the reference forward: LoRA trains at 4 N per token, the forward is 2 N: about half the training compute again
    assert 1.2 * t["orpo"] < t["dpo"] < 1.6 * t["orpo"]
    assert t["kto"] > 1.5 * t["sft"]


def test_sharded_reference_forward_gathers_the_weights():
    kw = {"method": "full", "num_gpus": 8, "parallelism": "zero3"}
    sc, mf, w, ev = _work(stage="dpo", **kw)
    sft2 = _work(micro_batch_size=8, **kw)[2]
    # a frozen copy under ZeRO-3 (TRL prepare_deepspeed keeps stage 3): every forward gathers 7/8 of its weights
    assert w.peer_bytes - sft2.peer_bytes == pytest.approx(sc.grad_accum * 7 / 8 * held_param_bytes(sc, mf))
    assert _work(stage="dpo", method="full", num_gpus=8, parallelism="ddp")[2].peer_bytes == \
        _work(micro_batch_size=8, method="full", num_gpus=8, parallelism="ddp")[2].peer_bytes


def test_ppo_trains_each_rollout_batch_four_times_with_its_value_model():
    kw = {"method": "full", "num_gpus": 8, "parallelism": "zero3", "stage": "ppo"}
    sc, mf, w, ev = _work(**kw)
    sft = _work(method="full", num_gpus=8, parallelism="zero3")[2]
    assert w.n_micro == PPO_EPOCHS * sc.grad_accum
    assert w.tokens_per_step == sft.tokens_per_step  # the rollout batch's sequences, once
    # policy + value (the same blocks, a 1-wide head) trained 4 times, more than twice the SFT step 4 times
    assert w.flops > 2 * PPO_EPOCHS * sft.flops * 0.9
    # value and reward forwards: one chunk of 16 sequences each, dispatched as one pass of both models' layers
    assert w.rollout is not None and w.forward_passes == 1 and w.layers == 2 * ev.spec.num_hidden_layers
    s = scenario_speed({**BASE, **kw}, "h100-sxm")
    s_sft = scenario_speed({**BASE, "method": "full", "num_gpus": 8, "parallelism": "zero3"}, "h100-sxm")
    assert 2 * PPO_EPOCHS * s_sft.step_s * 0.9 < s.step_s - s.generate_s < 2.5 * PPO_EPOCHS * s_sft.step_s


def test_torchtune_ppo_trains_each_rollout_batch_twice_and_forwards_16_at_once():
    """torchtune 0.4's PPO recipe: ppo_epochs 2, forward_batch_size 16 (its one config), not TRL's 4 and 64."""
    kw = {"method": "full", "stage": "ppo", "grad_accum": 8}
    sc, mf, w, _ = _work(framework="torchtune", **kw)
    hf = _work(**kw)[2]
    assert sc.micro_batch_size * sc.grad_accum == 32
    assert (w.n_micro, hf.n_micro) == (2 * 8, PPO_EPOCHS * 8)
    assert (w.forward_passes, hf.forward_passes) == (2, 1)  # 32 sequences: two chunks of 16, one of 64
    note = stage_time_note(sc)
    assert "trained 2 times (torchtune ppo_epochs)" in note


VLM = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "method": "lora", "seq_len": 512, "micro_batch_size": 4,
       "grad_accum": 4, "gradient_checkpointing": "full"}
IMAGE = {"images_per_sample": 1, "image_height": 1024, "image_width": 1024}


def _vlm(**kw):
    ev = Evaluator({**VLM, **kw})
    mf = scenario_flops(ev.spec, ev.base)
    return ev, mf, step_work(ev.base, mf, ev.estimate().model.num_trainable_params)


def test_image_tokens_and_the_tower_are_timed():
    ev0, mf0, w0 = _vlm()
    ev, mf, w = _vlm(**IMAGE)
    # Qwen2.5-VL's processor, within its checkpoints' max_pixels 12,845,056, rounds 1024 x 1024 to 1036 x 1036
    # (multiples of 28): 74 x 74 patches of 14 px, merged 2 x 2 into 1369 language-model tokens (models/vlm_tokens.py;
    # 980 x 980 and 1225 under the image processor's class default of 28 * 28 * 1280 pixels)
    assert (mf.tower_patches, mf.image_lm_tokens) == (5476, 1369)
    assert w.tokens_per_step == w0.tokens_per_step  # text tokens: what a dataset's token count counts
    assert w.flops > 2 * w0.flops
    vc = ev.spec.vision.image_config["vision_config"]
    d = ev.spec.vision.block.num_attention_heads * ev.spec.vision.block.head_dim
    # windowed attention (112 px = 8 x 8 patches) in 28 layers, the whole image in 4 (fullatt_block_indexes)
    assert mf.tower_attn_per_patch == 4 * d * (4 * 5476 + 28 * 64) and vc["fullatt_block_indexes"] == [7, 15, 23, 31]
    evz, _, wz = _vlm(**IMAGE, freeze_vision="yes")
    evt, _, wt = _vlm(**IMAGE, freeze_vision="no")
    # frozen: the tower's forward only (2 x weights per patch, attention once); trained with LoRA: 4 x and 3.5 x
    # the attention (backward = 2.5 forwards), under the scenario's full recomputation 2 and 1 more
    P, W, A = mf.tower_patches, mf.tower_mm_params, mf.tower_attn_per_patch
    assert tower_flops_per_sequence(evz.base, mf) == (2 * P * W, P * A)
    assert tower_flops_per_sequence(evt.base, mf) == (6 * P * W, 4.5 * P * A)
    assert tower_flops_per_sequence(dataclasses.replace(evt.base, method=Method.FULL), mf) == (8 * P * W, 4.5 * P * A)
    assert wt.flops > wz.flops


def test_plan_hours_count_the_stage():
    from vramfit.plan.planner import plan

    hours = {}
    for k, kw in {"sft": {}, "dpo": {"stage": "dpo"}}.items():
        rep = plan({**BASE, **kw}, dataset_tokens="100M", gpu_ids=["h100-sxm"])
        hours[k] = next(p.hours for p in rep.plans if p.num_gpus == 1)
    # per example (a pair: two sequences) and the reference forward's half of LoRA's 4 N again
    assert 2.2 * hours["sft"] < hours["dpo"] < 3.6 * hours["sft"]


def test_docs_figures_are_the_models():
    """docs/planner.md quotes the DPO/SFT time per token and the VLM image step's factor: computed here."""
    from pathlib import Path

    from vramfit.plan.planner import plan

    hours = [next(p.hours for p in plan({**BASE, **kw}, dataset_tokens="100M", gpu_ids=["h100-sxm"]).plans
                  if p.num_gpus == 1) for kw in ({}, {"stage": "dpo"})]
    base = {k: v for k, v in VLM.items() if k != "gradient_checkpointing"}
    vlm = [scenario_speed({**base, **kw}, "h100-sxm").step_s for kw in ({}, IMAGE)]
    text = " ".join((Path(__file__).parents[2] / "docs" / "planner.md").read_text().split())
    assert f"DPO takes {hours[1] / hours[0]:.2f}× SFT's time per example" in text
    assert f"take Qwen2.5-VL-7B {vlm[1] / vlm[0]:.1f}× its text-only step" in text


def test_a_vlm_reference_forward_runs_the_tower():
    """The DPO reference forward takes the images too (TRL passes pixel_values): one tower forward per pair's two
    sequences more than ORPO's (the same concatenated batch, no reference)."""
    from vramfit.choices import FreezeVision

    ev, mf, w = _vlm(**IMAGE, stage="dpo")
    _, _, orpo = _vlm(**IMAGE, stage="orpo")
    tokens = 2 * VLM["micro_batch_size"] * VLM["grad_accum"] * (VLM["seq_len"] + mf.image_lm_tokens)
    tower = sum(tower_flops_per_sequence(dataclasses.replace(ev.base, freeze_vision=FreezeVision.YES), mf))
    seqs = 2 * VLM["micro_batch_size"] * VLM["grad_accum"]
    assert w.flops - orpo.flops == pytest.approx(_fwd_flops(mf, tokens) + seqs * tower)


def test_plans_say_what_a_stage_step_counts():
    from vramfit.plan.planner import plan

    rep = plan({**BASE, "stage": "dpo", "reference": "precomputed"}, dataset_tokens="10M", gpu_ids=["h100-sxm"])
    line = next(a for a in rep.assumptions if a.startswith("Stage dpo:"))
    assert "one sequence per pair" in line and "precomputed reference log-probs" in line
    assert not any(a.startswith("Stage ") for a in plan(BASE, dataset_tokens="10M", gpu_ids=["h100-sxm"]).assumptions)
    # TRL 1.16.0's DPO runs no fused loss: the search tries none, no plan row says one
    fused = plan({**BASE, "stage": "dpo", "loss": "fused"}, dataset_tokens="10M", gpu_ids=["h100-sxm"])
    assert fused.plans and all(p.loss == "standard" for p in fused.plans)


def test_whole_gathers_place_each_layout():
    """One gather of 16 GPUs' shards on 2 nodes: flat rings cross the nodes, HSDP gathers inside the node, ZeRO++
    hpZ's forward gather crosses them (plan/traffic.py whole_gathers, as zero3_gather_bytes places it)."""
    from vramfit.plan.traffic import whole_gathers
    from vramfit.scenario import parse_scenario

    B = 1_000_000
    two = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 16, "num_nodes": 2}
    assert whole_gathers(parse_scenario({**two, "parallelism": "fsdp"}), 1, B) == (0.0, 15 / 16 * B)
    assert whole_gathers(parse_scenario({**two, "parallelism": "fsdp", "shard_scope": "node"}), 1, B) == (7 / 8 * B, 0.0)
    assert whole_gathers(parse_scenario({**two, "parallelism": "zero3", "shard_scope": "node"}), 1, B) == (0.0, 15 / 16 * B)
    assert whole_gathers(parse_scenario({**two, "parallelism": "ddp"}), 1, B) == (0.0, 0.0)
