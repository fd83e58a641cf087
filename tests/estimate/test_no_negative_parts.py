"""No byte figure of an estimate is negative: each one is a tensor set some code holds, so a negative part is a
modelling error (a subtraction of something never added in that phase). Found by fuzzing:

- the vision tower's backward (``backward-vision``) took the tower's pending gradients whole from a GPU's
  split share of every gradient (FSDP/ZeRO shards, a model-parallel rank's share): ``gradients`` < 0, and the
  phase total too at 256 GPUs (estimate/vision_backward.py ``tower_position``, ``grads_share``);
- a text-only step of Llama 3.2 Vision under offloaded checkpointing took the skipped cross-attention layers'
  inputs from the GPU, where offloading keeps a fixed number of block inputs whatever the depth: ``activations``
  < 0 (estimate/step.py ``_activations``, vision.skipped_cross_layers).
"""

from __future__ import annotations

import itertools

import pytest

from vramfit import estimate
from vramfit.errors import ScenarioError

QWEN25 = "Qwen/Qwen2.5-VL-7B-Instruct"
MLLAMA = "meta-llama/Llama-3.2-11B-Vision"


def _negatives(r: dict) -> list[tuple[str, float]]:
    """Every number below peak, components, phases (breakdowns and totals) and ranks that is < 0."""
    out: list[tuple[str, float]] = []

    def walk(x, path: str) -> None:  # noqa: ANN001
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
            out.append((path, x))

    for key in ("peak", "components", "phases", "ranks"):
        walk(r.get(key), key)
    return out


def _result(sc: dict) -> dict:
    r = estimate(sc).to_dict()
    assert not _negatives(r), (sc, _negatives(r))
    return r


def _phase(r: dict, name: str) -> dict[str, int]:
    return next(p["breakdown"] for p in r["phases"] if p["phase"] == name)


# --- N2: the tower's pending gradients, this GPU's share of them ---------------------------------------------


def _lora_block_numel(r: int, linears: list[tuple[int, int]]) -> int:
    """A LoRA adapter pair per linear: A (r x in) and B (out x r)."""
    return sum(r * (i + o) for i, o in linears)


def test_fsdp_lora_takes_this_gpus_shard_of_the_towers_pending_gradients():
    r = _result({"model": QWEN25, "parallelism": "fsdp", "num_gpus": 8, "images_per_sample": 4})
    # Qwen2.5-VL's tower: 32 blocks, hidden 1280, MLP 3420 (qkv 1280->3840, proj, gate/up 1280->3420, down
    # 3420->1280), LoRA r 16 on each (all-linear), fp32 adapters: at the top block's backward the 31 blocks below
    # have made no gradient yet, 31 x 348,480 x 4 B = 43,211,520 B whole, of which FSDP keeps 1/8 per GPU after each
    # unit's reduce-scatter
    per_block = _lora_block_numel(16, [(1280, 3840), (1280, 1280), (1280, 3420), (1280, 3420), (3420, 1280)])
    assert per_block == 348_480
    pending_here = 31 * per_block * 4 // 8
    all_here = _phase(r, "optimizer-step")["gradients"]  # every adapter gradient's shard
    assert all_here == 25_915_392
    # was 25,915,392 - 43,211,520 = -17,296,128
    assert _phase(r, "backward-vision")["gradients"] == all_here - pending_here == 20_513_952


def test_fsdp2_on_16_gpus_takes_a_sixteenth():
    # (torchtitan trains no vision-language model: FSDP2 under the HF Trainer, as accelerate runs it)
    r = _result({"model": "HuggingFaceTB/SmolVLM-Instruct", "parallelism": "fsdp", "fsdp_version": "2", "num_gpus": 16,
                 "images_per_sample": 4})
    # SmolVLM's SigLIP tower: 27 blocks, hidden 1152, MLP 4304 (q/k/v/out_proj, fc1, fc2), LoRA r 16, fp32
    per_block = _lora_block_numel(16, [(1152, 1152)] * 4 + [(1152, 4304), (4304, 1152)])
    assert per_block == 322_048
    all_here = _phase(r, "optimizer-step")["gradients"]
    assert _phase(r, "backward-vision")["gradients"] == all_here - 26 * per_block * 4 // 16 == 4_652_160


@pytest.mark.parametrize("model", ["google/gemma-3-4b-it", "Qwen/Qwen3-VL-2B-Instruct"])
def test_zero3_gradients_sit_in_the_flat_buffer_from_init(model: str):
    """ZeRO-3's gradient partitions live in one flat buffer allocated at init (DeepSpeed 0.19.8 runtime/zero/
    stage3.py ``grad_partitions_flat_buffer``; deepspeed.zero3_grads_resident): nothing is still to be made at the
    tower's backward, which had taken the tower's whole fp32-sized gradients from the 16-bit partition."""
    r = _result({"model": model, "parallelism": "zero3", "num_gpus": 8, "images_per_sample": 4})
    held = _phase(r, "forward")["gradients"]
    assert held > 0
    assert _phase(r, "backward-vision")["gradients"] == held == _phase(r, "optimizer-step")["gradients"]


def test_held_gradients_are_all_there_at_the_towers_backward():
    """grad_accum > 1: every gradient exists from the second micro-batch on (the decoder's block position counts them
    held too, contributions._block_position); the tower's not-yet-made ones were taken from them."""
    r = _result({"model": QWEN25, "images_per_sample": 4, "grad_accum": 4})
    held = _phase(r, "forward")["gradients"]
    assert _phase(r, "backward-vision")["gradients"] == held == 207_323_136


def test_a_single_gpu_figure_is_unchanged():
    # nothing split: all the adapters' 207,323,136 B less the tower's 43,211,520 B whole, as before
    r = _result({"model": QWEN25, "images_per_sample": 4})
    assert _phase(r, "backward-vision")["gradients"] == 207_323_136 - 43_211_520 == 164_111_616


TP = {"model": QWEN25, "framework": "torchtitan", "method": "full", "tensor_parallel": 4}
TP_IMAGES = [
    {**TP, "num_gpus": 32, "seq_len": 512, "images_per_sample": 2, "image_width": 4096},
    {**TP, "num_gpus": 256, "image_width": 224, "frames_per_sample": 3},
    {**TP, "num_gpus": 16, "images_per_sample": 4, "pipeline_parallel": 2, "grad_accum": 4},
    {**TP, "num_gpus": 16, "images_per_sample": 4, "context_parallel": 2},
]


@pytest.mark.parametrize("sc", TP_IMAGES)
def test_no_model_parallel_run_of_images(sc: dict):
    """Model parallelism is torchtitan's (ranks.py), and torchtitan v0.3.0 trains no vision-language model (profile
    image_model_types): these runs, whose tower gradients a rank had taken whole (-3.7 GB), are refused, naming the
    frameworks that feed Qwen2.5-VL's images through its tower."""
    key = "frames_per_sample" if "frames_per_sample" in sc and "images_per_sample" not in sc else "images_per_sample"
    with pytest.raises(ScenarioError) as e:
        estimate(sc)
    assert e.value.key == key and list(e.value.valid) == ["0"]
    assert str(e.value).endswith("trains no vision-language model, no images of model_type 'qwen2_5_vl'; "
                                 "frameworks that do: hf, unsloth (valid values: 0)")
    from vramfit.web.translate import untranslated

    assert untranslated([str(e.value)]) == []  # the page shows it in Portuguese too


def test_torchtune_takes_the_images_of_its_one_vision_language_family():
    assert estimate({"model": MLLAMA, "framework": "torchtune", "images_per_sample": 1}).peak.device_bytes > 0
    with pytest.raises(ScenarioError, match=r"torchtune \(torchtune-0\.1\) trains no vision-language model, no "
                       r"images of model_type 'mllama'; frameworks that do: hf, torchtune, unsloth"):
        estimate({"model": MLLAMA, "framework": "torchtune", "framework_version": "torchtune-0.1", "images_per_sample": 1})
    with pytest.raises(ScenarioError, match=r"torchtune \(torchtune-0\.4\) trains only mllama checkpoints, no images "
                       r"of model_type 'qwen2_5_vl'"):
        estimate({"model": QWEN25, "framework": "torchtune", "images_per_sample": 1})


# --- N3: a text-only step of a cross-attention model under offloaded checkpointing ---------------------------


def _forward_activations(sc: dict) -> tuple[int, dict]:
    r = _result(sc)
    return _phase(r, "forward")["activations"], r


@pytest.mark.parametrize("framework, seq_len", [("hf", 2048), ("unsloth", 2048), ("torchtitan", 500_000)])
def test_skipped_cross_attention_layers_leave_the_offloaded_gpu_tensors_alone(framework: str, seq_len: int):
    """Offloading keeps a fixed number of block inputs on the GPU (profile.offload_ckpt_block_tensors), whatever the
    depth; the 8 layers a text-only step skips (MllamaTextModel.forward ``continue``) had been taken from them.
    Against full checkpointing (every walked layer's input on the GPU) the difference is the 40 - 8 walked inputs
    less those the offload keeps; the host holds the 32 walked inputs only."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.scenario import parse_scenario

    sc = {"model": MLLAMA, "framework": framework, "seq_len": seq_len}
    offload, r = _forward_activations({**sc, "gradient_checkpointing": "offload"})
    full, _ = _forward_activations({**sc, "gradient_checkpointing": "full"})
    k = scenario_profile(parse_scenario({**sc, "gradient_checkpointing": "offload"})).offload_ckpt_block_tensors
    block_in = 1 * seq_len * 4096 * 2  # B x T x hidden, the bf16 residual stream
    assert offload == full - (40 - 8 - k) * block_in > 0
    if framework == "hf":
        assert (k, offload) == (2, 67_117_056)  # was -67,100,672
        assert r["host_bytes"] == (40 - 8) * block_in == 536_870_912  # was 40 inputs


def test_images_keep_every_layer():
    with_image, _ = _forward_activations({"model": MLLAMA, "gradient_checkpointing": "offload", "images_per_sample": 1})
    assert with_image > 0


def test_skipped_layers_keep_what_a_walked_layer_keeps_under_selective_checkpointing():
    """Selective checkpointing: a walked layer keeps all but its attention core (recomputed); the skipped ones had
    been taken back at a block input each, which left selective above no checkpointing."""
    from vramfit.estimate import resolve_spec
    from vramfit.estimate.allocator import round_allocation
    from vramfit.estimate.step import compute
    from vramfit.scenario import parse_scenario

    sc = {"model": MLLAMA, "seq_len": 2048}
    none, _ = _forward_activations({**sc, "gradient_checkpointing": "none"})
    selective, _ = _forward_activations({**sc, "gradient_checkpointing": "selective"})
    parsed = parse_scenario({**sc, "gradient_checkpointing": "selective"})
    items = compute(resolve_spec(parsed)[1], parsed).acts.saved.items
    core = sum(round_allocation(v) for k, v in items.items() if k.startswith("attn."))
    assert none - selective == (40 - 8) * core > 0


# --- the grid around them ------------------------------------------------------------------------------------

MODELS = [QWEN25, "google/gemma-3-4b-it", "Qwen/Qwen3-VL-2B-Instruct", "HuggingFaceTB/SmolVLM-Instruct", MLLAMA]
GRID = dict(
    parallelism=[("fsdp", 8), ("zero3", 8), ("fsdp", 16)],
    method=["lora", "full"],
    images=[{"images_per_sample": 4}, {"frames_per_sample": 3, "image_width": 224}, {}],
    gradient_checkpointing=["none", "full", "offload"],
)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("framework", ["hf", "torchtitan", "unsloth"])
def test_no_part_is_negative(model: str, framework: str):
    ran = 0
    for (par, gpus), method, images, ck in itertools.product(*GRID.values()):
        sc = {"model": model, "framework": framework, "parallelism": par, "num_gpus": gpus, "method": method,
              "gradient_checkpointing": ck, **images}
        try:
            r = estimate(sc).to_dict()
        except ScenarioError:  # not a valid run for this framework or model
            continue
        ran += 1
        assert not _negatives(r), (sc, _negatives(r))
    assert ran


@pytest.mark.parametrize("sc", [
    {"model": QWEN25, "images_per_sample": 4, "parallelism": "zero2", "num_gpus": 8, "offload": "optimizer"},
    {"model": QWEN25, "images_per_sample": 4, "parallelism": "zero1", "num_gpus": 8},
    {"model": MLLAMA, "gradient_checkpointing": "offload", "framework": "unsloth"},
    {"model": MLLAMA, "gradient_checkpointing": "selective-op"},
])
def test_model_parallel_and_offloaded_runs(sc: dict):
    _result(sc)
