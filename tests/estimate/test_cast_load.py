"""Unsloth's forced-float32 load (estimate/cast_load.py): Gemma 3 asked for in fp16 loads in bf16 and is cast to fp16
one module at a time, so the load's high point holds the weights and one fp16 copy of the largest 16-bit tensor."""

from __future__ import annotations

import torch
from torch import nn

from vramfit.estimate import estimate
from vramfit.sim.trace import LiveTracker

# UNSLOTH_VLM_NB-3 (benchmarks/data/measured/vlm.jsonl): Gemma 3 4B QLoRA on a T4 through FastVisionModel
NB3 = {"model": "google/gemma-3-4b-it", "method": "qlora", "quantize": "nf4-dq", "lora_rank": 16, "lora_alpha": 16,
       "lora_targets": "all-linear", "freeze_vision": "no", "precision": "fp16-true", "optimizer": "adamw",
       "micro_batch_size": 1, "seq_len": 128, "grad_accum": 4, "gradient_checkpointing": "offload",
       "attention": "flash", "images_per_sample": 1, "image_height": 896, "image_width": 896, "framework": "unsloth"}
EMBED_FP16 = 2 * 262208 * 2560  # Gemma 3 4B's token embedding (tied to lm_head) in fp16: 1,342,504,960 B


def _phases(sc: dict) -> dict[str, dict[str, int]]:
    return {p.phase: dict(p.breakdown) for p in estimate(sc).phases}


def test_the_load_holds_every_weight_and_the_embeddings_fp16_copy():
    r = estimate(NB3)
    load = dict(next(p for p in r.phases if p.phase == "load").breakdown)
    step = _phases(NB3)["optimizer-step"]
    assert load == {"weights": step["weights"], "quantized_base": step["quantized_base"], "temporaries": EMBED_FP16}
    assert EMBED_FP16 == 1_342_504_960
    # the cast is the run's allocated high point (5.18 GB: the step's tensors are small at 128 text tokens) ...
    assert r.peak.phase == "load" and r.peak.allocated_bytes == sum(load.values()) == 5_180_932_096
    # ... but not its reserved one: the load leaves nothing cached (empty_cache after every module), so
    # max_memory_reserved is the step's, the 5,803,018,240 B the step alone gives (5,769,525,248 B before the vision
    # backward kept the gradients held between micro-batches: grad_accum 4, every adapter gradient exists from the
    # second micro-batch on, the tower's 26 x 322,048 x 4 = 33,492,992 B not yet made ones included;
    # vision_backward.tower_position)
    assert r.peak.reserved_bytes == 5_803_018_240


def test_no_cast_outside_the_forced_float32_mode():
    assert "load" not in _phases({**NB3, "precision": "bf16-true"})  # a card with bf16: loaded as asked
    assert "load" not in _phases({**NB3, "framework": "hf"})  # transformers loads fp16 as it is
    # Qwen2.5-VL is not in Unsloth's FORCE_FLOAT32 list
    assert "load" not in _phases({**NB3, "model": "Qwen/Qwen2.5-VL-7B-Instruct", "image_height": 480,
                                  "image_width": 640})


def test_the_largest_16bit_tensor_is_the_embedding_for_lora_and_the_text_model():
    # a 16-bit LoRA base: gate_proj (10240 x 2560, 52 MB in fp16) is far smaller than the embedding
    load = _phases({**NB3, "method": "lora", "quantize": "none"})["load"]
    assert load["temporaries"] == EMBED_FP16 and "quantized_base" not in load
    # gemma3_text (FastLanguageModel hands it to the same loader): gemma-3-1b's 262,144 x 1,152 embedding
    text = {"model": "google/gemma-3-1b-pt", "method": "qlora", "precision": "fp16-true", "framework": "unsloth",
            "seq_len": 256}
    assert _phases(text)["load"]["temporaries"] == 2 * 262144 * 1152 == 603_979_776


def _unsloth_cast(model: nn.Module) -> None:
    """unslothai/unsloth-zoo@e8c8beae unsloth_zoo/patching_utils.py l. 244-266, the do_forced_float32 loop (the
    CUDA cache flush is a no-op here; the tracker counts live tensors)."""
    keys = ("down_proj", "up_proj", "gate_proj", "fc1", "fc2", "q_proj", "k_proj", "v_proj", "o_proj", "out_proj",
            "lm_head", "embed_tokens", "patch_embedding", "norm")
    for name, module in model.named_modules():
        if any(k in name for k in keys):
            module.to(torch.float16)
    for _, param in model.named_parameters():
        if param.dtype == torch.bfloat16:
            param.data = param.data.to(torch.float16)


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(4096, 256, dtype=torch.bfloat16)  # the largest tensor: 2 MiB in 16 bits
        self.q_proj = nn.Linear(256, 256, bias=False, dtype=torch.bfloat16)
        self.down_proj = nn.Linear(1024, 256, bias=False, dtype=torch.bfloat16)
        self.norm = nn.LayerNorm(256, dtype=torch.bfloat16)
        self.lm_head = nn.Linear(256, 4096, bias=False, dtype=torch.bfloat16)
        self.lm_head.weight = self.embed_tokens.weight  # tied, as Gemma 3's


def test_torch_casts_hold_one_extra_copy_of_the_largest_tensor_only():
    """The mechanism the load phase rests on, traced on small real CPU tensors (a fake tensor's ``Module.to`` swaps
    tensors instead of rebinding ``.data`` and refuses a tied weight): ``Module.to`` builds each fp16 tensor while its
    bf16 original is alive, one module at a time, and the tied lm_head is not cast again."""
    model = _Tiny()
    tracker = LiveTracker()
    for p in model.parameters():
        tracker.track(p, "param")
    with tracker:
        _unsloth_cast(model)
    tr = tracker.trace
    live, peak = 0, 0
    for ev in tr.events:
        live += tr.nbytes[ev] if ev >= 0 else -tr.nbytes[~ev]
        peak = max(peak, live)
    weights = 2 * (4096 * 256 + 256 * 256 + 1024 * 256 + 2 * 256)
    assert peak == weights + 2 * 4096 * 256
    assert live == weights  # every bf16 original freed, the shared weight cast once
    assert all(p.dtype == torch.float16 for p in model.parameters())


def test_an_evaluation_pass_opens_its_segments_after_the_cast():
    """The cast path keeps the step's reserved terms (estimate/__init__.py _reserved): at eval_batch_size 1 the pass's
    whole-logits tensors open one 2 MiB segment beyond the step's cached ones (evaluation.evaluation_reserved), which
    the old early return dropped (5,803,018,240 B, the step alone)."""
    r = estimate({**NB3, "eval_batch_size": 1})
    assert r.peak.phase == "load" and r.peak.reserved_bytes == 5_803_018_240 + 2 * 2**20 == 5_805_115_392


def test_the_steps_reserved_starts_from_its_own_peak_not_the_evaluation_pass():
    """At eval_batch_size 88 the pass (5,126,940,672 B allocated) is above the step's own peak (5,003,255,808 B, the
    vision backward) and below the cast: the step's reserved figure starts from its own peak and the pass adds only the
    segments it opens (58,720,256 B), not its whole allocated figure (the old code's 5,926,703,104 B)."""
    r = estimate({**NB3, "eval_batch_size": 88})
    phases = {p.phase: p.allocated_bytes for p in r.phases}
    assert phases["evaluate"] == 5_126_940_672 and phases["backward-vision"] == 5_003_255_808
    assert r.peak.phase == "load" and r.peak.reserved_bytes == 5_803_018_240 + 58_720_256 == 5_861_738_496


def test_full_fine_tuning_loads_in_bf16_and_casts_as_well():
    """The forced-float32 mode does not look at the method (unsloth@6a83bb53a5 loader.py l. 677-689, vision.py
    l. 341-345), so full fine-tuning has the load phase too, its weights counted in 16 bits also in -mixed, where the
    step keeps an fp32 master copy made after the load (cast_load.cast_load_phase)."""
    full = {"model": "google/gemma-3-1b-pt", "method": "full", "framework": "unsloth", "seq_len": 256}
    for precision in ("fp16-true", "fp16-mixed"):
        load = _phases({**full, "precision": precision})["load"]
        assert load == {"weights": 1_999_772_160, "temporaries": 2 * 262144 * 1152}
    assert _phases({**full, "precision": "fp16-true"})["optimizer-step"]["weights"] == 1_999_772_160
