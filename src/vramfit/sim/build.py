"""Build the Hugging Face model of a scenario on the ``meta`` device, as a training script would set it up.

Reusable by anything that needs the same model construction (the simulator on fake CPU tensors, ``vramfit measure``
on a real GPU): :func:`build_model` returns the model on ``meta``; :func:`materialize` allocates it on a device
(``to_empty``), inside a ``FakeTensorMode`` or for real.

What it mirrors (recorded in :attr:`BuiltModel.assumptions`):

- ``AutoModelForCausalLM.from_config`` with ``dtype`` = the scenario's parameter dtype (fp32 for ``-mixed``: master
  weights, autocast at run time) and ``attn_implementation`` ``sdpa`` / ``eager`` (``flash`` runs as ``sdpa``: both
  keep only the output and the log-sum-exp per head and row);
- ``use_cache=False`` (what fine-tuning scripts set; no KV cache in the training forward);
- LoRA: ``peft.get_peft_model`` with ``LoraConfig(r, lora_alpha, target_modules, lora_dropout)``; PEFT's default
  ``autocast_adapter_dtype=True`` makes the adapters fp32;
- QLoRA: every ``nn.Linear`` of the decoder blocks (not ``lm_head``) becomes a bitsandbytes 4-bit layer
  (:mod:`vramfit.sim.qlora`), then ``peft.prepare_model_for_kbit_training`` (casts every other fp16/bf16
  parameter to fp32, enables checkpointing when asked; only where ``kbit_prepare`` resolves to yes, the hf
  default: with no, the rest stays in the model's dtype) and ``get_peft_model``;
- gradient checkpointing through the model's own ``activation_checkpointing_enable`` as HF Trainer calls it
  (``use_reentrant=False`` is transformers 5's default); ``selective`` adds a ``torch.utils.checkpoint`` selective
  policy, ``offload`` keeps checkpoint inputs in host memory.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from vramfit.errors import ModelError, ScenarioError
from vramfit.estimate.framework import runs_under_autocast, scenario_profile
from vramfit.scenario import ALL_LINEAR, Attention, Checkpointing, Method, Precision, Quantize, Scenario
from vramfit.sim.hf_calls import enable_hf_checkpointing, with_eager_fallback

#: Keys that hold the number of decoder layers, by config family.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")

_PARAM_DTYPE = {
    Precision.BF16_TRUE: torch.bfloat16,
    Precision.FP16_TRUE: torch.float16,
    Precision.BF16_MIXED: torch.float32,
    Precision.FP16_MIXED: torch.float32,
    Precision.FP32: torch.float32,
}
_COMPUTE_DTYPE = {
    Precision.BF16_TRUE: torch.bfloat16,
    Precision.FP16_TRUE: torch.float16,
    Precision.BF16_MIXED: torch.bfloat16,
    Precision.FP16_MIXED: torch.float16,
    Precision.FP32: torch.float32,
}


@dataclass
class BuiltModel:
    """A model ready to train, on the device it was materialised on (``meta`` after :func:`build_model`)."""

    model: torch.nn.Module  # what the training loop calls (the PeftModel for LoRA/QLoRA)
    causal_lm: torch.nn.Module  # the transformers *ForCausalLM inside
    num_layers: int
    autocast_dtype: torch.dtype | None  # autocast dtype for -mixed precision, else None
    compute_dtype: torch.dtype
    vocab_size: int
    assumptions: list[str] = field(default_factory=list)
    offload_hooks: Any = None  # set for gradient_checkpointing=offload on fake tensors
    # FSDP2 MixedPrecisionPolicy(param_dtype=...) with no autocast: the profile's mixed_casts_params (torchtitan)
    mp_param_dtype: torch.dtype | None = None
    images: Any = None  # sim.images.ImageInputs of a vision-language batch, None for text only
    materialized: bool = False  # on its device already (FSDP1 wraps the materialised model: sim/fsdp.py)

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.causal_lm.get_output_embeddings()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def num_layers_of(config: dict) -> int:
    for key in _LAYER_KEYS:
        if isinstance(config.get(key), int):
            return config[key]
    if isinstance(config.get("text_config"), dict):  # multimodal (Llama 4): the language model's depth
        return num_layers_of(config["text_config"])
    raise ModelError("config.json has no num_hidden_layers")


def config_for_depth(config: dict, layers: int) -> dict:
    """The config with ``layers`` decoder layers; per-layer lists keep their first ``layers`` entries."""
    full = num_layers_of(config)
    out = dict(config)
    if not any(key in config for key in _LAYER_KEYS) and isinstance(config.get("text_config"), dict):
        out["text_config"] = config_for_depth(config["text_config"], layers)
        return out
    for key in _LAYER_KEYS:
        if key in out:
            out[key] = layers
    for key, value in config.items():
        if isinstance(value, list) and len(value) == full and key not in ("architectures",):
            out[key] = value[:layers]
    if isinstance(out.get("max_window_layers"), int) and out["max_window_layers"] >= full:
        out["max_window_layers"] = layers
    if isinstance(out.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < layers]
    return out


def hf_config(config: dict, layers: int | None = None, attention: Attention = Attention.SDPA) -> Any:
    """A transformers ``PretrainedConfig`` for a config.json dict (no remote code, nothing downloaded)."""
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type")
    if model_type == "qwen":
        raise ModelError("Qwen (1) is estimator-only: transformers has no built-in Qwen (1) model and its remote "
                         "modelling code (trust_remote_code) is never run by vramfit; use `vramfit estimate` for this model")
    if model_type not in CONFIG_MAPPING:
        raise ModelError(f"transformers cannot build model_type {model_type!r}: the simulator is unavailable "
                         "for it; use `vramfit estimate`")
    data = config_for_depth(config, layers) if layers is not None else dict(config)
    for key in ("auto_map", "transformers_version", "_name_or_path", "quantization_config"):
        data.pop(key, None)
    data["use_cache"] = False
    # a VLM's language model reads its own text_config.use_cache (transformers v5.24.0 utils/generic.py
    # merge_with_config_defaults: `getattr(self.config, "use_cache")`, the text config's, default True): off too, or
    # its forward builds a DynamicCache (torch.cat copies of every layer's k and v) that the model output holds
    if isinstance(data.get("text_config"), dict):
        data["text_config"] = {**data["text_config"], "use_cache": False}
    try:  # a value estimate reads past (torch_dtype "float8", an unknown rope_scaling type) transformers refuses
        cfg = CONFIG_MAPPING[model_type].from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"transformers cannot read this {model_type} config.json ({type(exc).__name__}: {exc}): the "
                         "simulator is unavailable for it; use `vramfit estimate`") from None
    cfg._attn_implementation = "eager" if attention is Attention.EAGER else "sdpa"
    return cfg


def build_model(config: dict, scenario: Scenario, layers: int | None = None) -> BuiltModel:
    """Build the scenario's model on ``meta`` with ``layers`` decoder layers (default: all)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from vramfit.sim.images import image_inputs

    _check_supported(scenario)
    images = image_inputs(config, scenario)
    # a vision-language checkpoint is built whole (vision tower included); fed images when the scenario has some
    auto = AutoModelForImageTextToText if isinstance(config.get("vision_config"), dict) else AutoModelForCausalLM
    depth = layers if layers is not None else num_layers_of(config)
    cfg = hf_config(config, depth, scenario.attention)
    precision = scenario.precision
    param_dtype = _PARAM_DTYPE[precision]
    compute_dtype = _COMPUTE_DTYPE[precision]
    assumptions = [
        "Simulates transformers + PEFT + HF Trainer: use_cache=False, model.train(), zero_grad(set_to_none=True), "
        "gradient clipping (max_grad_norm=1.0), loss / grad_accum per micro-batch."
    ]
    model = _instantiate(auto, cfg, scenario, param_dtype, assumptions)
    _keep_in_fp32(model, param_dtype)
    causal_lm = model
    vocab = int(model.get_output_embeddings().weight.shape[0])

    if scenario.method is Method.FULL:
        for p in model.parameters():
            p.requires_grad_(True)
    if scenario.method is Method.QLORA:
        from vramfit.sim.qlora import prepare_qlora

        assumptions += prepare_qlora(model, scenario, compute_dtype)
    offload_hooks = _enable_checkpointing(model, scenario, assumptions)
    if scenario.method is not Method.FULL:
        model = _apply_lora(model, scenario, assumptions)
    model.train()
    autocast = autocast_dtype_for(scenario, compute_dtype)
    mp_cast = None
    if autocast is not None and scenario_profile(scenario).mixed_casts_params:
        # torchtitan@9dec370 parallelize_llama.py apply_fsdp: MixedPrecisionPolicy(param_dtype=bf16,
        # reduce_dtype=fp32) and no torch.autocast; the all-gathered 16-bit parameters make every activation 16-bit
        autocast, mp_cast = None, compute_dtype
        assumptions.append("Mixed precision as torchtitan runs it: FSDP2 MixedPrecisionPolicy(param_dtype="
                           f"{str(compute_dtype).removeprefix('torch.')}, reduce_dtype=float32), no autocast.")
    return BuiltModel(model, causal_lm, depth, autocast, compute_dtype, vocab, assumptions, offload_hooks, mp_cast, images)


def _instantiate(auto: Any, cfg: Any, scenario: Scenario, param_dtype: torch.dtype, assumptions: list[str]) -> Any:
    """``auto.from_config`` on ``meta`` in ``param_dtype`` with the scenario's attention implementation (SDPA for
    ``flash``; selective checkpointing's wrapped one), eager where transformers has no SDPA for the model."""
    if scenario.attention is Attention.FLASH:
        assumptions.append("attention=flash is simulated with SDPA's fused kernel (no seq_len x seq_len scores; output "
                           "and per-row log-sum-exp saved), the same saved tensors as flash_attention_2.")
    attn = "eager" if scenario.attention is Attention.EAGER else "sdpa"
    if scenario.gradient_checkpointing is Checkpointing.SELECTIVE:
        from vramfit.sim.checkpointing import SELECTIVE_ASSUMPTION, selective_attention_implementation

        attn = selective_attention_implementation(attn)
        assumptions.append(SELECTIVE_ASSUMPTION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            try:
                return with_eager_fallback(lambda a: auto.from_config(cfg, dtype=param_dtype, attn_implementation=a),
                                           attn, assumptions)
            except (ValueError, ImportError, KeyError, AttributeError, TypeError) as exc:
                raise ModelError(f"transformers cannot build {cfg.model_type} with {attn} ({type(exc).__name__}: "
                                 f"{exc}): the simulator is unavailable for it; use `vramfit estimate`") from None


def _keep_in_fp32(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """What a 16-bit ``from_pretrained`` keeps fp32 and ``from_config`` does not: the parameters its dtype plan names
    (transformers v5.24.0 modeling_utils.py ``_get_dtype_plan`` l. 3844-3858, matched by regex search as
    core_model_loading.py l. 1919-1925 matches them), e.g. gpt-oss's norms on an fp16 load."""
    from transformers.core_model_loading import build_glob_alternation

    plan = model._get_dtype_plan(dtype)
    if not plan:
        return
    pattern = build_glob_alternation(list(plan))[0]
    for name, mod in model.named_modules():
        for leaf, p in list(mod._parameters.items()):
            if p is not None and p.dtype != torch.float32 and pattern.search(f"{name}.{leaf}" if name else leaf):
                mod._parameters[leaf] = torch.nn.Parameter(p.detach().float(), requires_grad=p.requires_grad)


def autocast_dtype_for(scenario: Scenario, compute_dtype: torch.dtype) -> torch.dtype | None:
    """Autocast for ``-mixed``, and where the estimator runs the step under it (one rule for estimate, simulation and
    measurement: :func:`vramfit.estimate.framework.runs_under_autocast`): HF's QLoRA recipe after
    prepare_model_for_kbit_training. ``kbit_prepare`` no, a GPTQ base or a framework that upcasts nothing runs
    ``-true`` without autocast (until 2026-12-06 every 16-bit QLoRA ran under it here: docs/validation.md)."""
    if scenario.precision.mixed:
        return compute_dtype
    if compute_dtype != torch.float32 and runs_under_autocast(scenario, scenario_profile(scenario)):
        return compute_dtype
    return None


def materialize(built: BuiltModel, device: str | torch.device) -> BuiltModel:
    """Allocate every parameter and buffer on ``device`` (uninitialised: memory, not values, matters).

    Tied parameters (``tie_word_embeddings``) stay tied: ``Module.to_empty`` gives each holder of a shared
    parameter its own new tensor when it swaps tensors (as it does for fake tensors), so the holders
    are pointed back at one parameter afterwards. Only the first holder is materialised: the others are
    detached first, so no second tensor is allocated and freed (a model loaded on the host and moved tied to the
    GPU allocates the shared weight once; the dropped copy left a cached segment of the output layer's size).
    """
    holders: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for mod in built.model.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                holders.setdefault(id(p), []).append((mod, name))
    for group in holders.values():
        for mod, name in group[1:]:
            mod._parameters[name] = None
    built.model.to_empty(device=device)
    for group in holders.values():
        if len(group) > 1:
            first_mod, first_name = group[0]
            shared = first_mod._parameters[first_name]
            for mod, name in group[1:]:
                mod._parameters[name] = shared
    return built


def _check_supported(scenario: Scenario) -> None:
    from vramfit.scenario import Framework, MoeKernel

    if scenario.framework not in (Framework.HF, Framework.TORCHTITAN):
        raise ScenarioError("framework", f"the simulator runs transformers + PEFT code (and torchtitan's FSDP2 and "
                            f"activation-checkpointing policies); {scenario.framework.value} is estimator-only",
                            ["hf", "torchtitan"])
    if scenario.framework is Framework.TORCHTITAN and scenario.method is not Method.FULL:
        raise ScenarioError("method", "torchtitan trains every weight: the simulator runs it with method=full",
                            ["full"])
    if scenario.moe_kernel is not MoeKernel.NONE:  # its ops are compiled CUDA extensions, with no fake-tensor kernels
        raise ScenarioError("moe_kernel", "kernels-community/megablocks runs compiled CUDA ops (sort, histogram, "
                            "binned_gather): estimator-only in the simulator", ["none"])
    for key in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel"):  # FSDP/ZeRO shards only
        if getattr(scenario, key) > 1:
            raise ScenarioError(key, f"the simulator runs no {key.replace('_', ' ')}ism; it is estimator-only", ["1"])
    if scenario.gradient_checkpointing is Checkpointing.SELECTIVE_OP and scenario.framework is not Framework.TORCHTITAN:
        # torchtitan's op policy (sim/checkpointing.py); transformers has no such mode
        raise ScenarioError("gradient_checkpointing", "selective-op is torchtitan's op policy: simulated with "
                            "framework=torchtitan only",
                            [c.value for c in Checkpointing if c is not Checkpointing.SELECTIVE_OP])
    if scenario.method is Method.QLORA and scenario.quantize not in (Quantize.NF4, Quantize.NF4_DQ, Quantize.FP4,
                                                                      Quantize.FP4_DQ):
        raise ScenarioError("quantize", f"{scenario.quantize.value} is estimator-only in the simulator",
                            ["nf4", "nf4-dq", "fp4", "fp4-dq"])


def _enable_checkpointing(model: Any, scenario: Scenario, assumptions: list[str]) -> Any:
    mode = scenario.gradient_checkpointing
    if mode in (Checkpointing.NONE, Checkpointing.SELECTIVE):
        return None
    if mode is Checkpointing.SELECTIVE_OP:
        from vramfit.sim.checkpointing import install_op_sac

        install_op_sac(model, assumptions)
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # as HF Trainer does (also after prepare_model_for_kbit_training): kwargs None -> use_reentrant=False
        enable_hf_checkpointing(model)
    assumptions.append("Gradient checkpointing via model.activation_checkpointing_enable() "
                       "(torch.utils.checkpoint, use_reentrant=False) around every decoder layer.")
    if scenario_profile(scenario).ckpt_reentrant:  # use_reentrant resolves to yes (estimate/reentrant_fsdp1.py)
        assumptions.append("The run's checkpointing is reentrant (use_reentrant); this trace runs transformers 5's "
                           "non-reentrant checkpoint inside each layer, so what reentrant checkpointing around FSDP1 "
                           "units keeps to the end of backward (block inputs and their gradients) is the estimator's "
                           "alone.")
    return _maybe_offload(model, mode, assumptions)


def _maybe_offload(model: Any, mode: Checkpointing, assumptions: list[str]) -> Any:
    if mode is not Checkpointing.OFFLOAD:
        return None
    from vramfit.sim.checkpointing import install_offload

    return install_offload(model, assumptions)


def lora_target_modules(model: torch.nn.Module, targets: tuple[str, ...]) -> str | list[str]:
    """PEFT ``target_modules`` for the scenario's ``lora_targets``; unknown names are a ScenarioError."""
    from vramfit.sim.qlora import is_linear

    block_linears: set[str] = set()
    all_names: set[str] = set()
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if is_linear(mod) or isinstance(mod, torch.nn.Embedding):
            all_names.add(leaf)
            if ".layers." in f".{name}." or ".h." in f".{name}." or ".blocks." in f".{name}.":
                if is_linear(mod):
                    block_linears.add(leaf)
    if targets == (ALL_LINEAR,):
        return "all-linear"
    names: set[str] = set()
    for t in targets:
        if t == ALL_LINEAR:
            names |= block_linears
        elif t in all_names:
            names.add(t)
        else:
            raise ScenarioError("lora_targets", f"{t!r} is not a module of this model",
                                [ALL_LINEAR, *sorted(all_names)])
    return sorted(names)


def _language_model_targets(model: torch.nn.Module, scenario: Scenario) -> list[str]:
    """A vision-language model whose tower and projector stay frozen (``freeze_vision``: estimate/vision.py
    trains_vision): the full names of the adapted linears inside the language model only (``get_decoder()``, transformers
    v5.24.0 modeling_utils.py: ``model.language_model`` / ``model.text_model``), as a trainer that freezes the vision
    side targets them; PEFT matches a full name exactly. Empty otherwise (PEFT's own matching)."""
    from vramfit.estimate.vision import trains_vision
    from vramfit.sim.qlora import is_linear

    if getattr(model.config, "vision_config", None) is None or trains_vision(scenario, scenario_profile(scenario)):
        return []
    decoder = model.get_decoder()
    prefix = next(name for name, mod in model.named_modules() if mod is decoder)
    wanted = lora_target_modules(decoder, scenario.lora_targets)
    return [f"{prefix}.{name}" for name, mod in decoder.named_modules() if is_linear(mod)
            and (wanted == ALL_LINEAR or name.rsplit(".", 1)[-1] in wanted)]


def _apply_lora(model: Any, scenario: Scenario, assumptions: list[str]) -> Any:
    import peft

    if scenario.dora:
        from vramfit.sim.qlora import patch_dora_dequantize

        patch_dora_dequantize()  # DoRA's own de-quantization of a 4-bit base (sim/qlora.py)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = peft.get_peft_model(model, lora_config(model, scenario))
    assumptions.append(lora_note(scenario) + "; autocast_adapter_dtype=True keeps adapters in fp32 and casts each "
                       "adapted layer's input to fp32.")
    return pm


def lora_config(model: torch.nn.Module, scenario: Scenario) -> Any:  # noqa: ANN401 - peft.LoraConfig
    """The scenario's ``peft.LoraConfig``, one for the simulator and ``vramfit measure``: rank, alpha, dropout,
    targets, DoRA and ``modules_to_save`` (whole trained copies, estimate/saved_modules.py)."""
    import peft

    targets = _language_model_targets(model, scenario) or lora_target_modules(model, scenario.lora_targets)
    return peft.LoraConfig(r=scenario.lora_rank, lora_alpha=scenario.lora_alpha, lora_dropout=_dropout(scenario),
                           target_modules=targets, bias="none", task_type="CAUSAL_LM", use_dora=scenario.dora,
                           modules_to_save=list(scenario.modules_to_save) or None)


def _dropout(scenario: Scenario) -> float:
    """The scenario's ``lora_dropout``, else its framework's default, by the estimator's rule (profile.lora_dropout)."""
    return scenario_profile(scenario).lora_dropout(scenario.lora_dropout)


def lora_note(scenario: Scenario) -> str:
    """The assumption line of :func:`lora_config`."""
    return (f"LoRA via peft.get_peft_model (r={scenario.lora_rank}, dropout={_dropout(scenario)}"
            f"{', use_dora' if scenario.dora else ''}"
            f"{', modules_to_save=' + ','.join(scenario.modules_to_save) if scenario.modules_to_save else ''})")
