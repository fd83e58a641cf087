"""Preference and RL keys the frameworks' own files carry: LLaMA-Factory's KTO and PPO examples (one example per GPU
batch, reward_model, max_new_tokens), its ref_model, LoRA keys left in a full fine-tune's file; Axolotl's rpo_alpha,
gc_steps and precompute_ref_log_probs; TRL's DPOConfig reference keys."""

from pathlib import Path

import pytest

from vramfit import estimate, from_config
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError, VramfitError
from vramfit.scenario import parse_scenario
from vramfit.stage_keys import min_micro_batch

FIX = Path(__file__).parent / "fixtures"
LLAMA3_VOCAB = 128_256  # meta-llama/Meta-Llama-3-8B config.json vocab_size


def _entries(imp):
    return {e.key: e for e in imp.entries}


def test_llamafactory_kto_example_runs_one_example_per_gpu_batch():
    """LLaMA-Factory's CustomKTOTrainer builds the KL inputs at preprocessing and skips TRL's batch-size check."""
    sc = from_config(FIX / "llamafactory_kto_lora.yaml").scenario
    assert (sc.stage.value, sc.micro_batch_size, sc.framework_version, min_micro_batch(sc)) == (
        "kto", 1, "llamafactory-0.9", 1)
    score = dict(next(p for p in estimate(sc).phases if p.phase == "score").breakdown)
    # the KL (and reference) pass over the one sequence: its fp32 logits, host_softmax's copy and the log_softmax output
    assert score["score_logits"] == 3 * 4 * 2048 * LLAMA3_VOCAB
    two = dict(next(p for p in estimate(sc.replace(micro_batch_size=2)).phases if p.phase == "score").breakdown)
    assert two["score_logits"] == 2 * score["score_logits"]


def test_trl_kto_still_needs_two_examples_per_gpu_batch():
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"model": "meta-llama/Meta-Llama-3-8B", "stage": "kto", "micro_batch_size": 1})
    assert str(err.value) == ("micro_batch_size: KTO's KL term needs at least 2 examples per GPU batch (TRL refuses 1) "
                              "(valid values: 2 or more)")
    trl = parse_scenario({"model": "meta-llama/Meta-Llama-3-8B", "stage": "kto"})
    lf = parse_scenario({"model": "meta-llama/Meta-Llama-3-8B", "stage": "kto", "framework_version": "llamafactory-0.9"})
    assert (trl.micro_batch_size, min_micro_batch(trl), lf.micro_batch_size, min_micro_batch(lf)) == (2, 2, 1, 1)


def test_llamafactory_ppo_example_reads_its_generation_and_reports_the_reward_model():
    imp = from_config(FIX / "llamafactory_ppo_lora.yaml")
    sc, e = imp.scenario, _entries(imp)
    # the prompt is cut to cutoff_len 2048; the rollout adds max_new_tokens 512
    assert (sc.stage.value, sc.completion_len, sc.seq_len, sc.reference.value) == ("ppo", 512, 2560, "auto")
    assert (e["top_k"].kind, e["top_k"].note, e["top_p"].note) == ("ignored", "sampling", "sampling")
    assert e["reward_model"].kind == "not modelled yet"
    assert e["reward_model"].note.startswith("reward_model_type lora: LLaMA-Factory loads the reward model as a second "
                                             "adapter on the policy")
    assert "seq_len" not in imp.write_keys  # cutoff_len is the prompt's length only under ppo


def test_llamafactory_ppo_default_generation_length_and_full_reward_model(tmp_path):
    imp = from_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: ppo\nfinetuning_type: lora\n"
                    "reward_model: saves/rm\nreward_model_type: full\nref_model: meta-llama/Meta-Llama-3-8B\n"
                    "cutoff_len: 1024\nppo_epochs: 2\nppo_buffer_size: 2\nnum_beams: 4\nmax_length: 64\n"
                    "reward_model_quantization_bit: 4\n", dialect="llamafactory")
    e = _entries(imp)
    assert (imp.overrides["completion_len"], imp.overrides["seq_len"], imp.overrides["reference"]) == (1024, 2048, "copy")
    assert e["max_new_tokens"].kind == "default"  # GeneratingArguments.max_new_tokens 1024
    assert e["reward_model"].note.startswith("reward_model_type full: counted as PPO's frozen reward model")
    assert {k: e[k].kind for k in ("ppo_epochs", "ppo_buffer_size", "num_beams", "max_length",
                                   "reward_model_quantization_bit")} == {
        "ppo_epochs": "ignored", "ppo_buffer_size": "not modelled yet", "num_beams": "not modelled yet",
        "max_length": "ignored", "reward_model_quantization_bit": "not modelled yet"}
    with pytest.raises(VramfitError, match=r"reward_model_type: lora needs finetuning_type lora \(valid values with "
                                           r"full: full, api\)"):
        from_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: ppo\nfinetuning_type: full\n"
                  "reward_model: saves/rm\n", dialect="llamafactory")


@pytest.mark.parametrize(("stage", "reference"), [("stage: dpo\n", "copy"), ("stage: kto\n", "copy"),
                                                  ("stage: dpo\npref_loss: orpo\n", None), ("stage: sft\n", None)])
def test_llamafactory_ref_model_is_a_frozen_copy_where_the_stage_loads_one(stage, reference):
    imp = from_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nfinetuning_type: lora\n"
                    "per_device_train_batch_size: 2\nref_model: meta-llama/Meta-Llama-3-8B\nref_model_adapters: x\n"
                    + stage, dialect="llamafactory")
    e = _entries(imp)
    assert imp.overrides.get("reference") == reference
    if reference is None:
        assert (e["ref_model"].kind, e["ref_model"].note) == ("ignored", "no reference model in this stage")
    else:
        assert imp.scenario.reference.value == "copy" and e["ref_model_adapters"].kind == "not modelled yet"


def test_llamafactory_full_fine_tune_ignores_leftover_lora_keys():
    imp = from_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nfinetuning_type: full\nlora_rank: 8\n"
                    "lora_target: all\nlora_alpha: 16\nuse_dora: false\nmax_new_tokens: 128\n", dialect="llamafactory")
    e = _entries(imp)
    assert imp.overrides["method"] == "full" and "lora_rank" not in imp.overrides
    assert {k: (e[k].kind, e[k].note) for k in ("lora_rank", "lora_target", "use_dora", "max_new_tokens")} == {
        "lora_rank": ("ignored", "a LoRA setting: LLaMA-Factory ignores it under finetuning_type full"),
        "lora_target": ("ignored", "a LoRA setting: LLaMA-Factory ignores it under finetuning_type full"),
        "use_dora": ("ignored", "off"), "max_new_tokens": ("ignored", "inference")}
    with pytest.raises(VramfitError, match=r"use_dora: LLaMA-Factory accepts it with finetuning_type lora only"):
        from_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nfinetuning_type: full\nuse_dora: true\n",
                  dialect="llamafactory")


AX_DPO = """base_model: mistralai/Mistral-7B-v0.1
rl: dpo
adapter: lora
lora_r: 16
lora_target_modules: [q_proj, v_proj]
micro_batch_size: 2
rpo_alpha: 0.5
gc_steps: 10
precompute_ref_log_probs: true
trl:
  precompute_ref_log_probs: true
"""


def test_axolotl_rpo_alpha_gc_steps_and_precomputed_reference():
    imp = from_text(AX_DPO, dialect="axolotl")
    e = _entries(imp)
    assert (imp.scenario.rpo_alpha, imp.scenario.reference.value) == (0.5, "precomputed")
    assert e["gc_steps"].kind == "ignored" and e["trl.precompute_ref_log_probs"].kind == "ignored"


def test_axolotl_trl_section_precompute_is_dropped_as_axolotl_drops_it():
    imp = from_text(AX_DPO.replace("precompute_ref_log_probs: true\ntrl:", "trl:"), dialect="axolotl")
    assert "reference" not in imp.overrides and imp.scenario.reference.value == "auto"
    assert _entries(imp)["trl.precompute_ref_log_probs"].note.startswith("not a key of Axolotl's trl section")
    kto = from_text(AX_DPO.replace("rl: dpo", "rl: kto"), dialect="axolotl")
    assert "rpo_alpha" not in kto.overrides and kto.scenario.reference.value == "precomputed"  # axolotl-0.12: every RL
    orpo = from_text(AX_DPO.replace("rl: dpo", "rl: orpo"), dialect="axolotl")
    assert ("reference" not in orpo.overrides
            and _entries(orpo)["precompute_ref_log_probs"].note == "no reference model in this stage")


TRL_DPO = """model_name_or_path: meta-llama/Llama-3.1-8B
stage: dpo
use_peft: true
lora_r: 16
max_length: 1024
per_device_train_batch_size: 1
force_use_ref_model: true
rpo_alpha: 0.1
sync_ref_model: true
ref_model_sync_steps: 64
ref_adapter_name: ref
use_logits_to_keep: true
"""


def test_trl_dpo_reference_keys():
    imp = from_text(TRL_DPO, dialect="trl")
    e = _entries(imp)
    # force_use_ref_model alone loads no copy (TRL's scripts pass ref_model=None under PEFT): said, not counted
    assert (imp.scenario.reference.value, imp.scenario.rpo_alpha) == ("auto", 0.1)
    assert e["force_use_ref_model"].kind == "not modelled yet"
    assert {k: e[k].kind for k in ("sync_ref_model", "ref_model_sync_steps", "ref_adapter_name",
                                   "use_logits_to_keep")} == {
        "sync_ref_model": "not modelled yet", "ref_model_sync_steps": "ignored", "ref_adapter_name": "not modelled yet",
        "use_logits_to_keep": "not modelled yet"}
    precomputed = from_text(TRL_DPO + "precompute_ref_log_probs: true\n", dialect="trl")
    assert precomputed.scenario.reference.value == "precomputed"  # no model held: force_use_ref_model changes nothing


def test_llamafactory_ppo_max_length_caps_prompt_and_completion_when_max_new_tokens_is_off():
    """GeneratingArguments.to_dict keeps max_length when max_new_tokens <= 0: the cap on prompt and completion
    together (review 2026-12-07: the pair was refused as 'not a positive integer')."""
    base = ("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: ppo\nfinetuning_type: lora\nreward_model: saves/rm\n"
            "cutoff_len: 1024\nmax_new_tokens: -1\n")
    imp = from_text(base + "max_length: 1536\n", dialect="llamafactory")
    assert (imp.overrides["completion_len"], imp.overrides["seq_len"]) == (512, 1536)
    assert _entries(imp)["max_new_tokens"].kind == "ignored"
    with pytest.raises(VramfitError, match=r"^max_length: must exceed cutoff_len \(1024\) when max_new_tokens is 0"):
        from_text(base + "max_length: 1024\n", dialect="llamafactory")


def test_llamafactory_ppo_max_length_path_names_a_bad_cutoff_len_itself():
    """A cutoff_len that is no integer is named as itself on the max_length path, not blamed on max_length."""
    bad = ("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: ppo\nfinetuning_type: lora\nreward_model: x\n"
           "cutoff_len: [[[[1]]]]\nmax_new_tokens: 0\nmax_length: 4096\n")
    with pytest.raises(VramfitError, match=r"cutoff_len: .* is not a positive integer"):
        from_text(bad, dialect="llamafactory")
