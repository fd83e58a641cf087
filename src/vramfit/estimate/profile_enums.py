"""The enums and small records a framework profile's fields take (estimate/profile_fields.py holds the profile's
fields, estimate/framework_profiles.py the profiles): each value names the code (file and version) it models."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from vramfit.choices import Method, Stage


class LossLayout(str, Enum):
    """How logits and the cross-entropy are laid out for ``loss="standard"`` (see estimate/loss.py)."""

    # transformers v4.46.0 (PR #33902) loss/loss_utils.py ForCausalLMLoss: model-dtype logits,
    # ``logits.float()`` inside the loss
    HF_UPCAST_IN_LOSS = "hf-upcast-in-loss"
    # torchtune v0.4.0 modules/transformer.py TransformerDecoder: ``self.output(h).float()``
    TORCHTUNE_UPCAST_IN_MODEL = "torchtune-upcast-in-model"
    # torchtune@c69fba18b (v0.1) recipes/*_finetune_*.py train loop: the model's fp32 logits, then
    # `logits = logits[..., :-1, :].contiguous()` (a shifted fp32 copy), `logits.transpose(1, 2)` into
    # CrossEntropyLoss and no `del logits`: the copy lives through backward and the optimizer step
    # (torchtune PR #1046, 2024-06-04, added `del logits`: "otherwise it peaks backward memory")
    TORCHTUNE_SHIFTED_LOGITS_KEPT = "torchtune-shifted-logits-kept"
    # lit-gpt@8641822 finetune/lora.py: model(..., lm_head_chunk_size=128) + chunked_cross_entropy
    LITGPT_CHUNKED_HEAD = "litgpt-chunked-head"
    # transformers v4.44.2 models/llama/modeling_llama.py LlamaForCausalLM.forward: `logits = logits.float()`
    # in the model, then `shift_logits = logits[..., :-1, :].contiguous()` and CrossEntropyLoss
    HF_UPCAST_IN_MODEL = "hf-upcast-in-model"
    # unsloth@015bdef unsloth/models/llama.py CausalLM forward: no logits (UNSLOTH_RETURN_LOGITS=0),
    # unsloth_zoo loss_utils.unsloth_fused_ce_loss: chunk(X) @ W, fp32 CE per chunk, the hidden
    # states' gradient computed in forward and saved (ctx.save_for_backward(grad_inputs, ...))
    UNSLOTH_FUSED_CE = "unsloth-fused-ce"
    # unsloth@0e0d8fc (2024.12.3) models/llama.py CausalLM forward: unsloth_zoo@bb133c7 loss_utils
    # fused_linear_cross_entropy -> Apple's Cut Cross-Entropy (apple/ml-cross-entropy@1f3ebdb cce.py): no logits;
    # its backward allocates zeros_like for the hidden states and for the whole lm_head weight (estimate/loss.py)
    APPLE_CCE = "apple-cce"
    # transformers v4.46.0-v4.48 loss/loss_utils.py ForCausalLMLoss: `logits = logits.float()`, then
    # `shift_logits = logits[..., :-1, :].contiguous()`, a second fp32 copy (removed by huggingface/transformers
    # PR #35646, merged 2025-01-13, "to reduce memory overhead")
    HF_UPCAST_SHIFTED_IN_LOSS = "hf-upcast-shifted-in-loss"
    # unsloth@0927c34 (2024.8, 2024-08-19) models/llama.py l. 911-931 CausalLM_fast_forward: ``logits =
    # self.lm_head(...)`` in the model dtype, ``fast_cross_entropy_loss`` (kernels/cross_entropy_loss.py
    # Fast_CrossEntropyLoss): the logits saved, their gradient written over them in place (estimate/loss.py)
    UNSLOTH_TRITON_CE = "unsloth-triton-ce"
    # torchtitan v0.3.0 components/loss.py ChunkedLossWrapper (from 786e26f8e, 2026-04-27; llama3's config_registry
    # default): the model returns the final norm's output (``_skip_lm_head``), the loss runs ``lm_head`` and the
    # cross-entropy on 8 detached sequence chunks, each chunk's backward inside the loss call, the hidden states'
    # gradient gathered in an fp32 buffer (GradAccumulator) and the output layer's FSDP2 gradient accumulated
    # unsharded, reduce-scattered at the last chunk (estimate/titan_loss.py)
    TORCHTITAN_CHUNKED_LOSS = "torchtitan-chunked-loss"


class DoraBase(str, Enum):
    """Where a DoRA layer's base output, the factor ``(mag_norm_scale - 1)`` multiplies and keeps, comes from
    (estimate/dora.py)."""

    # peft v0.9.0-v0.13.x tuners/lora/dora.py DoraLinearLayer.forward: ``F.linear(x, weight)`` on DoRA's own (cast,
    # de-quantized) weight, which that matmul keeps for the input's gradient
    RECOMPUTED = "recomputed"
    # peft v0.14.0 (338aeff38, #2122) tuners/lora/variants.py DoraLinearVariant.forward: the base layer's output where
    # the dropout is an nn.Identity, recomputed as above with dropout
    REUSED_WITHOUT_DROPOUT = "reused-without-dropout"
    # torchtune v0.4.0 modules/peft/dora.py DoRALinear.forward: ``base_out`` of the undropped input, always
    REUSED = "reused"


class LoopCarry(str, Enum):
    """What a training loop still references from the previous micro-batch while the next one runs its forward.

    A name the loop rebinds with ``x = model(...)`` is rebound only once the call has returned (Python evaluates the
    right-hand side first), so whatever it held lives through the whole next forward; a tensor with a ``grad_fn``
    keeps its autograd graph alive with it (estimate/retained_graph.py: what backward did not free stays)."""

    # the step's locals die before the next forward: transformers v5.24.0 trainer.py Trainer.training_step ends
    # `self.accelerator.backward(loss, **kwargs); return loss.detach()`; AnswerDotAI/fsdp_qlora@4cd6923 train.py
    # l. 894-895 sets `output = None`, `loss = None` after optimizer.step(); torchtune v0.4.0
    # recipes/lora_finetune_single_device.py _loss_step `del logits` (its running_loss keeps a graph whose saved
    # tensors backward has freed: torchao's linear_nf4 keeps no input beside them)
    NOTHING = "nothing"
    # meta-llama/llama-recipes@1e0f8a1f utils/train_utils.py l. 88-89: `outputs = model(**batch)`, `loss =
    # outputs.loss`, no `del`: the outputs the loop keeps (LossMemory.kept, scenario keeps_outputs) and, through
    # `loss`, the graph
    OUTPUTS = "outputs"
    # Lightning-AI/litgpt@5895df10 litgpt/finetune/lora.py fit() l. 276-280 (full.py l. 229-232, adapter.py l. 245-249;
    # lit-gpt@8641822 finetune/lora.py l. 216, full.py l. 169 the same): `logits = model(...)`, `loss =
    # chunked_cross_entropy(logits, ...)`, `fabric.backward(...)`, optimizer.step(), no `del`: the fp32 logits Fabric
    # returned (LossMemory.held, alive through backward and the step too) and the graph; torchtune@c69fba18b (0.1)
    # recipes/*_finetune_*.py `logits = self._model(input_ids)`, its shifted copy kept (LossMemory.kept)
    LOGITS = "logits"

    @property
    def keeps_graph(self) -> bool:
        """The loop still binds a tensor with a grad_fn (its ``loss``), so the previous autograd graph is alive."""
        return self is not LoopCarry.NOTHING


@dataclass(frozen=True)
class FrameworkVersion:
    """An older release whose code keeps different tensors: the profile fields it changes, with the source."""

    name: str  # the scenario's framework_version value
    source: str  # the release and file where the behaviour differs
    changes: tuple[tuple[str, Any], ...]  # (FrameworkProfile field, value in that release)


@dataclass(frozen=True)
class StageRecipe:
    """A recipe a framework ships for a stage beyond SFT, where it runs its own code instead of TRL's trainer (profile
    field ``stage_recipes``, whose comment cites the files at the release): the methods it trains and whether it
    runs on more than one GPU."""

    stage: Stage
    methods: tuple[Method, ...]  # what it trains: adapters (lora; qlora where the config's model builder quantizes)
    distributed: bool  # False: one GPU only
    recipes: tuple[str, ...]  # the recipe files' names, as the assumption line and refusals say them
    # the reference log-probs can be computed before training (TRL's precompute_ref_log_probs); torchtune v0.4.0's DPO
    # recipes run the reference forward every step (recipes/lora_dpo_single_device.py l. 521-527)
    precomputes_reference: bool = False
    # PPO: how many times the recipe trains each rollout batch (its ppo_epochs) and how many sequences its value and
    # reward forwards take at once; 0: TRL's trainer's (plan/stage_work.py PPO_EPOCHS, PPO_FORWARD_CHUNK)
    ppo_epochs: int = 0
    forward_chunk: int = 0


class CompileScope(str, Enum):
    """What ``compile: true`` compiles (the scenario switch; the framework decides the scope)."""

    MODEL_AND_LOSS = "model-and-loss"  # torch.compile(model) and the loss (torchtune compile: True)
    # torchtitan@9dec370 parallelize_llama.py apply_compile: torch.compile(transformer_block,
    # fullgraph=True) per block; train.py keeps loss_fn eager ("compiling loss function causes
    # CUDA errors, turning off for now")
    BLOCKS = "blocks"
    # torchtitan from bbb1b616e (2025-04-02, "Enable compiling the loss function") to v0.2.2 and main: each block
    # compiled as above, and the loss too (v0.2.2 components/loss.py l. 33-35: torch.compile(loss_fn) where
    # compile.enable and "loss" in compile.components, whose default is ["model", "loss"], config/job_config.py);
    # model.norm and the output layer stay eager
    BLOCKS_AND_LOSS = "blocks-and-loss"


class OptimizerImpl(str, Enum):
    """torch.optim implementation the framework's AdamW runs (torch v2.13.0 torch/optim/adamw.py)."""

    FUSED = "fused"  # _fused_adamw: one kernel, no parameter-sized temporaries
    FOREACH = "foreach"  # _multi_tensor_adamw: torch._foreach_sqrt copies the second moment


@dataclass(frozen=True)
class ForcedFp32:
    """What a framework's forced-float32 mode keeps in fp32 for one model type asked for in fp16 (profile field
    ``fp16_forced_fp32``); every other activation and every weight stays 16-bit, and nothing runs under autocast.
    The norms' outputs that feed the linears stay 16-bit in every family read (each patched RMSNorm returns fp16)."""

    residual: bool = False  # the residual stream between and inside blocks
    mlp: bool = False  # the gated MLP's saved products (gate, act, up)
    attention: bool = False  # q, k, v and the attention kernel's output


class SavedCopyDtype(str, Enum):
    """The dtype a ``modules_to_save`` copy is trained in (profile field ``saved_copy_dtype``)."""

    # PEFT: ``copy.deepcopy(self.original_module)`` keeps the original's dtype (huggingface/peft@5d602fdbf
    # src/peft/utils/other.py ModulesToSaveWrapper.update)
    ORIGINAL = "original"
    # Unsloth since unslothai/unsloth@539fcea071 (2024-10-28, #1200 "Fix/casting continue pretraining"): the copy goes to
    # the GPU as ``dtype if dtype != torch.float16 else torch.float32`` (unsloth@015bdef models/llama.py l. 162-189
    # _offload_frozen_module_for_training, "Tesla T4 must use float32"; unsloth@0e0d8fc get_peft_model l. 2211-2224;
    # FastModel: unsloth-zoo@ce232d6c training_utils.py l. 490-510 prepare_model_for_training(patch_modules_to_save))
    FP16_AS_FP32 = "fp16-as-fp32"
