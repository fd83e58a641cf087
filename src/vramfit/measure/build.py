"""Build the scenario's model for a real training run: random weights from its config, or local weights.

This is the code path a user's script takes, run for real (not the simulator's surrogate):

- random weights (default): the model is built on ``meta`` from the config.json (nothing downloaded),
  then every tensor is allocated on the device and initialised by the model's own ``_init_weights``
  (tied embeddings re-tied). QLoRA: every ``nn.Linear`` of the decoder blocks (not the output
  embeddings, as transformers' bitsandbytes quantizer skips them) becomes a real
  ``bitsandbytes.nn.Linear4bit`` whose ``Params4bit`` is quantized on the device from a random weight in
  the parameter dtype, one layer at a time, as ``from_pretrained(quantization_config=...)`` does per tensor;
- ``weights=DIR``: ``AutoModelForCausalLM.from_pretrained(DIR, local_files_only=True)`` with the same
  dtype, attention and (QLoRA) ``BitsAndBytesConfig``; never remote code;
- then as the simulator (:mod:`vramfit.sim.build`, whose config, LoRA-target and selective-attention
  helpers are reused): ``prepare_model_for_kbit_training`` for QLoRA, gradient checkpointing through
  ``activation_checkpointing_enable`` (``offload=True`` for ``offload``), LoRA through
  ``peft.get_peft_model``, ``model.train()``.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.scenario import Attention, Checkpointing, Framework, Loss, Method, Precision, Quantize, Scenario
from vramfit.sim.count import count_parameters  # noqa: F401 - one rule with the simulator; re-exported
from vramfit.sim.hf_calls import enable_hf_checkpointing, with_eager_fallback

_QUANT_4BIT = {
    Quantize.NF4: ("nf4", False),
    Quantize.NF4_DQ: ("nf4", True),
    Quantize.FP4: ("fp4", False),
    Quantize.FP4_DQ: ("fp4", True),
}


@dataclass
class BuiltRun:
    """A model ready for the step loop."""

    model: Any  # what the loop calls (a PeftModel for LoRA/QLoRA)
    causal_lm: Any  # the transformers *ForCausalLM inside
    vocab_size: int
    autocast_dtype: Any  # torch dtype for -mixed precision, else None
    num_params: int
    num_trainable_params: int
    assumptions: list[str] = field(default_factory=list)


def model_config(scenario: Scenario) -> dict:
    """The config.json dict of the scenario's model (catalog, local path, Hub config, or generic shape)."""
    from vramfit.models.catalog import resolve_generic, resolve_model

    if scenario.model is not None:
        return dict(resolve_model(scenario.model).config)
    return dict(resolve_generic(scenario.params).config)


def check_measurable(scenario: Scenario) -> None:
    """Raise :class:`ScenarioError` for scenario values the harness cannot run (yet)."""
    if scenario.framework is not Framework.HF:
        raise ScenarioError("framework", "vramfit measure runs transformers + PEFT code", ["hf"])
    if scenario.gradient_checkpointing is Checkpointing.SELECTIVE_OP:  # torchtitan's own blocks only
        raise ScenarioError("gradient_checkpointing", "selective-op (torchtitan's op policy) is not measurable",
                            [c.value for c in Checkpointing if c is not Checkpointing.SELECTIVE_OP])
    if scenario.compile:  # the harness runs the model eagerly: a compiled run's figures would be an eager one's
        raise ScenarioError("compile", "vramfit measure runs the model eagerly, not torch.compile'd", ["false"])
    if scenario.method is Method.QLORA and scenario.quantize not in _QUANT_4BIT:
        raise ScenarioError("quantize", f"{scenario.quantize.value} is not measurable yet",
                            [q.value for q in _QUANT_4BIT])
    if scenario.optimizer.value in ("adamw-4bit", "adamw-8bit-torchao") and importlib.util.find_spec("torchao") is None:
        raise ScenarioError("optimizer", f"{scenario.optimizer.value} runs torchao's optimizer: install torchao to "
                                         "measure it")
    if scenario.loss is not Loss.STANDARD:
        raise ScenarioError("loss", "vramfit measure runs transformers' own loss (labels passed to the model)",
                            ["standard"])
    par = scenario.parallelism.value
    if par.startswith("zero"):
        raise ScenarioError("parallelism", "DeepSpeed ZeRO runs are not supported by vramfit measure yet",
                            ["none", "ddp", "fsdp", "fsdp-grad-op"])
    if par == "fsdp-no-shard":  # the harness wraps with FSDP2 fully_shard (measure/dist.py), which has no NO_SHARD
        raise ScenarioError("parallelism", "FSDP1 NO_SHARD is not measurable yet (vramfit measure runs FSDP2)",
                            ["none", "ddp", "fsdp", "fsdp-grad-op"])
    if scenario.method is Method.QLORA and par.startswith("fsdp"):
        raise ScenarioError("parallelism", "FSDP of a 4-bit base is not measurable yet", ["none", "ddp"])


def _dtypes(precision: Precision) -> tuple[Any, Any]:
    import torch

    param = {Precision.BF16_TRUE: torch.bfloat16, Precision.FP16_TRUE: torch.float16}.get(precision, torch.float32)
    compute = {Precision.FP32: torch.float32, Precision.FP16_TRUE: torch.float16,
               Precision.FP16_MIXED: torch.float16}.get(precision, torch.bfloat16)
    return param, compute


def _attention(scenario: Scenario, device: str, notes: list[str]) -> str:
    if scenario.gradient_checkpointing is Checkpointing.SELECTIVE:
        from vramfit.sim.checkpointing import SELECTIVE_ASSUMPTION, selective_attention_implementation

        notes.append(SELECTIVE_ASSUMPTION)
        kind = "eager" if scenario.attention is Attention.EAGER else "sdpa"
        return selective_attention_implementation(kind)
    if scenario.attention is Attention.EAGER:
        return "eager"
    if scenario.attention is Attention.FLASH:
        if device.startswith("cuda") and importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
        notes.append("attention=flash: flash-attn is not installed (or no CUDA), so SDPA ran instead.")
    return "sdpa"


def build_run(scenario: Scenario, config: dict, device: str, weights: str | Path | None = None) -> BuiltRun:
    """Build, quantize, prepare, checkpoint and wrap the scenario's model on ``device``."""
    check_measurable(scenario)
    param_dtype, compute_dtype = _dtypes(scenario.precision)
    notes: list[str] = []
    attn = _attention(scenario, device, notes)
    qlora = scenario.method is Method.QLORA
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if weights is not None:
            model = _from_pretrained(Path(weights), scenario, param_dtype, compute_dtype, attn, device, notes)
            notes.append(f"Weights loaded from {weights} (local files only).")
        else:
            model = _from_config(config, scenario, param_dtype, compute_dtype, attn, device, notes)
            notes.append("Random weights from the config (nothing downloaded); values do not change memory.")
    if scenario.method is Method.FULL:
        for p in model.parameters():
            p.requires_grad_(True)
    gc_mode = scenario.gradient_checkpointing
    if qlora:
        from peft import prepare_model_for_kbit_training

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=gc_mode in (Checkpointing.FULL, Checkpointing.OFFLOAD),
                gradient_checkpointing_kwargs={"use_reentrant": False})
        notes.append("QLoRA: peft.prepare_model_for_kbit_training (non-4-bit parameters cast to fp32).")
    if gc_mode in (Checkpointing.FULL, Checkpointing.OFFLOAD):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            enable_hf_checkpointing(model, offload=gc_mode is Checkpointing.OFFLOAD)
        notes.append("Gradient checkpointing: model.activation_checkpointing_enable()"
                     + (" with offload=True (saved inputs in pinned host memory)." if gc_mode is Checkpointing.OFFLOAD
                        else "."))
    causal_lm = model
    if scenario.method is not Method.FULL:
        model = _apply_lora(model, scenario, notes)
    model.train()
    vocab = int(causal_lm.get_output_embeddings().weight.shape[0])
    total, trainable = count_parameters(model)
    # autocast where the estimator runs the step under it: -mixed, and HF QLoRA after prepare_model_for_kbit_training
    # as Trainer(bf16=True) runs it (vramfit.sim.build.autocast_dtype_for)
    from vramfit.sim.build import autocast_dtype_for

    autocast = autocast_dtype_for(scenario, compute_dtype)
    return BuiltRun(model, causal_lm, vocab, autocast, total, trainable, notes)


def _from_pretrained(path: Path, scenario: Scenario, param_dtype: Any, compute_dtype: Any, attn: str,
                     device: str, notes: list[str]) -> Any:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not path.is_dir():
        raise ScenarioError("weights", f"not a directory: {path}")
    kwargs: dict[str, Any] = {}
    if scenario.method is Method.QLORA:
        import torch

        quant_type, dq = _QUANT_4BIT[scenario.quantize]
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=dq,
            bnb_4bit_compute_dtype=compute_dtype, bnb_4bit_quant_storage=torch.uint8)
    try:
        return with_eager_fallback(lambda a: AutoModelForCausalLM.from_pretrained(
            str(path), dtype=param_dtype, attn_implementation=a, device_map={"": device},
            local_files_only=True, trust_remote_code=False, use_cache=False, **kwargs), attn, notes)
    except OSError as exc:
        raise ScenarioError("weights", f"cannot load a model from {path}: {exc}") from None


def _from_config(config: dict, scenario: Scenario, param_dtype: Any, compute_dtype: Any, attn: str,
                 device: str, notes: list[str]) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from vramfit.sim.build import hf_config

    cfg = hf_config(config, None, scenario.attention)
    with torch.device("meta"):
        model = with_eager_fallback(lambda a: AutoModelForCausalLM.from_config(cfg, dtype=param_dtype,
                                                                              attn_implementation=a), attn, notes)
    if scenario.method is Method.QLORA:
        quantize_block_linears(model, scenario.quantize, param_dtype, compute_dtype, device,
                               float(getattr(cfg, "initializer_range", 0.02)))
    materialize(model, device)
    return model


def quantize_block_linears(model: Any, quantize: Quantize, weight_dtype: Any, compute_dtype: Any, device: str,
                           std: float = 0.02) -> int:
    """Replace every ``nn.Linear`` but the output embeddings by a bitsandbytes 4-bit layer quantized on ``device``.

    Returns the number of layers replaced. Each layer's random weight exists only while it is quantized.
    """
    import bitsandbytes as bnb
    import torch

    quant_type, dq = _QUANT_4BIT[quantize]
    head = model.get_output_embeddings()
    targets = [(n, m) for n, m in model.named_modules() if type(m) is torch.nn.Linear and m is not head]
    for name, lin in targets:
        new = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                                compute_dtype=compute_dtype, compress_statistics=dq, quant_type=quant_type,
                                quant_storage=torch.uint8, device="meta")
        w = torch.empty((lin.out_features, lin.in_features), dtype=weight_dtype, device=device).normal_(0.0, std)
        new.weight = bnb.nn.Params4bit(w, requires_grad=False, compress_statistics=dq, quant_type=quant_type,
                                       quant_storage=torch.uint8, module=new).to(device)
        del w
        if lin.bias is not None:
            new.bias = torch.nn.Parameter(torch.zeros(lin.out_features, dtype=weight_dtype, device=device),
                                          requires_grad=False)
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, new)
    model.is_loaded_in_4bit = True
    model.quantization_method = "bitsandbytes"
    return len(targets)


def materialize(model: Any, device: str) -> None:
    """Allocate every tensor still on ``meta`` on ``device`` and initialise it as the model would."""
    import torch

    done = []
    for mod in model.modules():
        tensors = list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False))
        if any(t.is_meta for t in tensors):
            mod.to_empty(device=device, recurse=False)
            done.append(mod)
    with torch.no_grad():
        for mod in done:
            model._init_weights(mod)
    if getattr(model.config, "tie_word_embeddings", False) or getattr(
        getattr(model.config, "get_text_config", lambda: model.config)(), "tie_word_embeddings", False
    ):
        model.tie_weights()


def _apply_lora(model: Any, scenario: Scenario, notes: list[str]) -> Any:
    import peft

    from vramfit.sim.build import lora_config, lora_note

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = peft.get_peft_model(model, lora_config(model, scenario))
    notes.append(lora_note(scenario) + ", adapters in fp32 by PEFT's autocast_adapter_dtype default.")
    return pm
