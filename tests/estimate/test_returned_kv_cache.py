"""returns_kv_cache (framework_version llama-recipes-2023): the model builds and returns its KV cache in training.

meta-llama/llama-recipes@e5970e2e loads Llama-2 without use_cache=False and checkpoints its blocks with torch's
checkpoint_wrapper, so transformers v4.31.0 LlamaModel keeps use_cache from the config (True) and returns every
layer's k and v (modeling_llama.py l. 615, 658-663, 704-705)."""

from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.loss import loss_memory, returned_cache_bytes
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA2 = resolve_model("meta-llama/Llama-2-7b-hf").spec
GIB = 1024**3


def _sc(**keys):
    return parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "micro_batch_size": 4,
                           "seq_len": 2048, "precision": "bf16-true", "gradient_checkpointing": "full",
                           "attention": "eager", "framework_version": "transformers-4.44+llama-recipes-2023", **keys})


def _mem(sc):
    return loss_memory(LLAMA2, sc, scenario_profile(sc))


def test_the_cache_is_every_layers_k_and_v_in_bf16():
    # 32 layers x (k, v) x [4, 32 heads, 2048, 128] x 2 bytes = 4.0 GiB
    sc = _sc()
    assert returned_cache_bytes(LLAMA2, sc, scenario_profile(sc)) == 4 * GIB


def test_no_cache_without_the_recipe_or_when_blocks_save_k_and_v():
    plain = _sc(framework_version="transformers-4.44")
    assert returned_cache_bytes(LLAMA2, plain, scenario_profile(plain)) == 0
    # not checkpointed: the cache's k and v are the tensors eager attention saved for backward
    nockpt = _sc(gradient_checkpointing="none")
    assert returned_cache_bytes(LLAMA2, nockpt, scenario_profile(nockpt)) == 0


def test_a_kept_output_holds_the_cache_through_backward_and_a_dropped_one_only_in_forward():
    logits = 4 * 4 * 2048 * 32000  # transformers 4.31 returns logits.float()
    kept, dropped = _mem(_sc(keeps_outputs=True)), _mem(_sc())
    assert kept.kept == logits + 4 * GIB and kept.cache == 4 * GIB
    assert dropped.kept == 0 and dropped.cache == 4 * GIB
    base = _mem(_sc(framework_version="transformers-4.44"))
    assert dropped.forward_peak == base.forward_peak + 4 * GIB
    assert dropped.backward_peak == base.backward_peak


def peak(sc):
    return max(p.total for p in compute(LLAMA2, sc).phases)


def block_phase(sc):
    return next(p.total for p in compute(LLAMA2, sc).phases if p.phase.value == "backward-block")


def test_the_kept_cache_raises_the_backward_block_phase_by_its_size():
    # (the step's peak is the next forward's, where the previous output is still bound: test_eager_forward_moment.py)
    with_cache = block_phase(_sc(keeps_outputs=True, num_gpus=4, parallelism="fsdp", fsdp_version="1"))
    # (the plain release checkpoints reentrantly around the FSDP1 units, estimate/reentrant_fsdp1.py; the recipe does not)
    without = block_phase(_sc(keeps_outputs=True, num_gpus=4, parallelism="fsdp", fsdp_version="1",
                              framework_version="transformers-4.44", use_reentrant="no"))
    assert with_cache - without == 4 * GIB


def test_transformers_returns_the_cache_under_torchs_checkpoint_wrapper_only():
    # the library fact the profile models, on the installed transformers: config.use_cache is on by default, torch's
    # checkpoint_wrapper leaves it on (a cache of L x (k, v) [B, kv heads, S, head_dim]); HF's own checkpointing turns it off
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, LlamaDecoderLayer), checkpoint_wrapper_fn=lambda m:
                                   checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
    x = torch.randint(0, 100, (3, 8))
    cache = model(input_ids=x, labels=x).past_key_values
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert sum(t.numel() * t.element_size() for t in tensors) == 2 * 2 * 3 * 2 * 8 * 16 * 2
    model.gradient_checkpointing_enable()
    assert model(input_ids=x, labels=x).past_key_values is None


def test_the_recipe_wraps_without_sync_module_states():
    # llama-recipes@e5970e2e llama_finetuning.py l. 131-138: FSDP(..., device_id, limit_all_gathers=True) and no
    # sync_module_states (torch's default False): the wrap replay has no broadcast bucket, where the HF Trainer's
    # FSDP1 profile (PEFT's fsdp_config.yaml, fsdp_sync_module_states: true) has 250 MiB buckets
    from vramfit.estimate.fsdp_reserved import SYNC_BUCKET_BYTES, wrap_args
    from vramfit.gpus import get_gpu

    def bucket(**keys):
        sc = _sc(parallelism="fsdp", fsdp_version="1", num_gpus=4, gpu="a100-40gb-sxm", **keys)
        return wrap_args(compute(LLAMA2, sc, get_gpu(sc.gpu)))[5]

    assert bucket() == 0
    assert bucket(framework_version="transformers-4.44") == SYNC_BUCKET_BYTES == 250 * 2**20
