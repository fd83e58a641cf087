"""The scenario: one training configuration, validated once (see ``shared/design/scenario.md``).

Every finite choice is an enum (:mod:`vramfit.choices`); :func:`parse_scenario` turns a mapping (YAML,
JSON, CLI flags, a web form) into a frozen :class:`Scenario` or raises
:class:`~vramfit.errors.ScenarioError` naming the key and listing the valid values. Nothing is silently
defaulted except where the schema gives a default. :data:`FIELDS` is the one table of the keys (type,
help, labels, unit, default, valid values) from which the CLI options, the web schema and labels and
``docs/scenario-reference.md`` are derived.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields
from enum import Enum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramfit.choices import (  # noqa: F401 - the scenario's enums, re-exported (vramfit.scenario.Method, ...)
    AdamwImpl,
    Attention,
    Checkpointing,
    Framework,
    FreezeVision,
    FsdpVersion,
    Generation,
    Interconnect,
    KbitPrepare,
    LogitsToKeep,
    Loss,
    Method,
    MoeKernel,
    Offload,
    Optimizer,
    Parallelism,
    PipelineSchedule,
    Precision,
    Quantize,
    QuantizeExperts,
    QuantizeVision,
    Reference,
    ShardScope,
    Stage,
    UseReentrant,
    _Choice,
)
from vramfit.errors import ScenarioError
from vramfit.fieldspec import FieldSpec, Kind
from vramfit.layout_keys import LAYOUT_FIELDS, check_layout_keys
from vramfit.limits import MAX_BATCH, MAX_GPUS, MAX_RANK, MAX_SEQ_LEN  # noqa: F401 - upper bounds that catch typos
from vramfit.safe_input import ascii_digits, key_label, load_data_file, shown, to_float
from vramfit.stage_keys import STAGE_FIELDS, STAGE_FOLLOWERS, check_stage_keys
from vramfit.units import parse_param_count

if TYPE_CHECKING:
    from vramfit.estimate.deepspeed import DeepSpeedConfig

#: Target module names PEFT understands across the catalog's families, besides ``all-linear``.
ALL_LINEAR = "all-linear"

#: The modules PEFT's ``modules_to_save`` can train as whole copies beside LoRA (estimate/saved_modules.py): the input
#: embedding and the output layer, under the names ``lora_targets`` gives them.
SAVED_MODULES = ("embed_tokens", "lm_head")



@dataclass(frozen=True)
class Scenario:
    """One training configuration. Field names are the JSON contract of ``scenario.md``."""

    model: str | None = None
    params: int | None = None
    method: Method = Method.LORA
    precision: Precision = Precision.BF16_TRUE  # parse_scenario: the framework profile's default_precision
    quantize: Quantize = Quantize.NONE
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = (ALL_LINEAR,)
    optimizer: Optimizer = Optimizer.ADAMW
    optimizer_impl: AdamwImpl = AdamwImpl.AUTO  # torch AdamW: fused or foreach (extension)
    optimizer_in_backward: bool = False
    micro_batch_size: int = 1
    seq_len: int = 2048
    grad_accum: int = 1
    gradient_checkpointing: Checkpointing = Checkpointing.NONE
    attention: Attention = Attention.SDPA
    loss: Loss = Loss.STANDARD
    num_gpus: int = 1
    parallelism: Parallelism = Parallelism.NONE
    offload: Offload = Offload.NONE
    gpu: str | None = None
    framework: Framework = Framework.HF
    lora_dropout: float | None = None  # None: the framework's default (PEFT/torchtune 0.0, litgpt 0.05)
    dora: bool = False  # PEFT LoraConfig(use_dora=True): weight-decomposed LoRA (extension; estimate/dora.py)
    # PEFT LoraConfig(modules_to_save=[...]): whole trained copies of embed_tokens / lm_head (extension;
    # estimate/saved_modules.py)
    modules_to_save: tuple[str, ...] = ()
    compile: bool = False  # torch.compile of the model and loss (extension of the shared schema)
    quantize_experts: QuantizeExperts = QuantizeExperts.AUTO  # MoE experts in the quantized base (extension)
    # the DeepSpeed config (path or mapping) whose zero_optimization keys size the ZeRO buffers; None: the
    # HF docs' example config ("auto" buckets) - estimate/deepspeed.py (extension)
    deepspeed_config: DeepSpeedConfig | None = None
    kbit_prepare: KbitPrepare = KbitPrepare.AUTO  # QLoRA: prepare_model_for_kbit_training runs (extension)
    use_reentrant: UseReentrant = UseReentrant.AUTO  # reentrant gradient checkpointing (extension)
    # the framework release whose behaviour is modelled; None: the profile's newest (estimate/framework.py)
    framework_version: str | None = None
    fsdp_version: FsdpVersion = FsdpVersion.AUTO  # FSDP1 or FSDP2 under parallelism fsdp (extension)
    # a custom loop keeps `output = model(...)` (its logits) until after optimizer.step() (estimate/loss.py)
    keeps_outputs: bool = False
    # sequences per GPU of the evaluation passes run between optimizer steps; 0: none (estimate/evaluation.py)
    eval_batch_size: int = 0
    # positions the model computes logits for: all, or the label positions only (estimate/loss.py label_rows)
    logits_to_keep: LogitsToKeep = LogitsToKeep.ALL
    label_share: float = 1.0  # the share of each sequence's tokens that carry a label (answer tokens)
    stage: Stage = Stage.SFT  # training stage (extension; vramfit.stage_keys validates its keys)
    reference: Reference = Reference.AUTO
    num_generations: int | None = None  # GRPO: completions per prompt (None: TRL's 8 for grpo)
    completion_len: int | None = None  # GRPO/PPO: generated tokens, part of seq_len (None: TRL's 256)
    generation: Generation = Generation.HF
    vllm_gpu_memory_utilization: float | None = None  # vllm-colocate: fraction of the card (None: TRL's 0.3)
    vllm_sleep: bool = False  # vllm-colocate: vllm_enable_sleep_mode (frees vLLM memory while training)
    cpo_alpha: float | None = None  # simpo: weight of the NLL on the chosen half (None: TRL's 1.0; stage_keys)
    rpo_alpha: float | None = None  # dpo: weight of the RPO NLL on the chosen half (None: no NLL term)
    num_nodes: int = 1  # machines the num_gpus are spread over, num_gpus / num_nodes each (extension)
    shard_scope: ShardScope = ShardScope.ALL  # ZeRO/FSDP over every rank, or inside a node (HSDP, hpZ)
    interconnect: Interconnect = Interconnect.AUTO  # the network between nodes (data/interconnects.csv)
    tensor_parallel: int = 1  # model parallelism as torchtitan runs it (vramfit.layout_keys)
    pipeline_parallel: int = 1
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    pipeline_virtual_stages: int = 1
    context_parallel: int = 1
    expert_parallel: int = 1  # borrows from dp_shard x cp x tp ranks (torchtitan efsdp), not in model_parallel_size
    images_per_sample: int = 0  # vision-language models: images in each sequence (extension)
    image_height: int = 448  # pixels of each image, before the processor resizes or tiles it
    image_width: int = 448
    frames_per_sample: int = 0  # vision-language models: video frames in each sequence, image_height x image_width
    freeze_vision: FreezeVision = FreezeVision.AUTO  # the vision tower and projector stay frozen
    quantize_vision: QuantizeVision = QuantizeVision.AUTO  # QLoRA: the tower and projector in the quantized base
    moe_kernel: MoeKernel = MoeKernel.NONE  # what runs the MoE experts: the model's own forward or a hub kernel

    @property
    def sees_pixels(self) -> bool:
        """Whether the vision tower runs: images or video frames in each sequence."""
        return bool(self.images_per_sample or self.frames_per_sample)

    @property
    def trains_adapters(self) -> bool:
        return self.method is not Method.FULL

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch_size * self.seq_len

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus // self.num_nodes

    @property
    def shard_group(self) -> int:
        """Ranks that share one copy of the sharded state: the node's GPUs with ``shard_scope=node`` on
        FSDP (HSDP), else every rank (ZeRO-3 hpZ keeps the primary shards over every rank)."""
        hybrid = self.shard_scope is ShardScope.NODE and self.parallelism in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)
        return self.gpus_per_node if hybrid else self.num_gpus

    @property
    def model_parallel_size(self) -> int:
        """Ranks that share one micro-batch: tensor x pipeline x context parallel."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def per_rank_layout(self) -> bool:
        """Ranks differ beyond data-parallel sharding: model parallelism or expert parallelism."""
        return self.model_parallel_size > 1 or self.expert_parallel > 1

    @property
    def data_parallel_size(self) -> int:
        return self.num_gpus // self.model_parallel_size

    @property
    def effective_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.data_parallel_size

    def to_dict(self) -> dict[str, Any]:
        """The scenario as JSON-ready plain values, every key present."""
        # one level, no deep copy (dataclasses.asdict recursed into every value: a fifth of a web
        # request's time); nested values are copied where they are containers
        out: dict[str, Any] = {}
        for name in _field_names():
            v = getattr(self, name)
            if isinstance(v, Enum):
                v = v.value
            elif name == "deepspeed_config" and v is not None:
                v = v.to_dict()
            elif isinstance(v, (tuple, list)):
                v = [x.value if isinstance(x, Enum) else x for x in v]
            elif isinstance(v, dict):
                v = copy.deepcopy(v)
            out[name] = v
        return out

    def replace(self, **changes: Any) -> Scenario:
        """A new validated scenario with some keys changed (values as a user would give them)."""
        data = self.to_dict()
        given = getattr(self, "_given", None)  # the keys the user set (parse_scenario); None: not known
        # values derived from another key follow it when that key changes and they are not given
        # (grad_accum: GRPO's default is the least accumulation that holds whole groups of completions per step,
        # stage_keys.check_stage_keys, so it follows the stage, the GPU count, the micro-batch and the group size;
        # elsewhere its default is 1; micro_batch_size: KTO's default is the least its trainer runs, TRL's 2 and
        # LLaMA-Factory's 1, so it follows the framework and its release too: stage_keys.kto_min_batch)
        derived = {"method": ("quantize", "precision"), "lora_rank": ("lora_alpha",),
                   "framework": ("precision", "parallelism", "micro_batch_size"), "framework_version": ("micro_batch_size",),
                   "stage": ("grad_accum", "micro_batch_size"),
                   "num_gpus": ("parallelism", "num_nodes", "shard_scope", "grad_accum"),
                   "micro_batch_size": ("grad_accum",), "num_generations": ("grad_accum",),
                   "optimizer_in_backward": ("grad_accum",)}
        for key, followers in derived.items():
            for follower in followers:
                if key in changes and follower not in changes and not self._keeps(follower, given):
                    data.pop(follower, None)
        if ({"num_gpus", "framework", "framework_version"} & set(changes) and "gradient_checkpointing" not in changes
                and not self._keeps("gradient_checkpointing", given) and self._ckpt_derived(changes)):
            data.pop("gradient_checkpointing", None)  # derived again from the new count, framework or release
        if "num_gpus" in changes and "num_nodes" not in changes:
            self._node_layout(data, changes["num_gpus"])
        for follower in STAGE_FOLLOWERS if "stage" in changes else ():
            if follower not in changes and not self._keeps(follower, given):
                data.pop(follower, None)
        if "params" in changes and "model" not in changes:
            data.pop("model", None)
        if "model" in changes and "params" not in changes:
            data.pop("params", None)
        data.update(changes)
        new = parse_scenario(data)
        if given is not None:  # what the user set stays set, and the changed keys join it
            object.__setattr__(new, "_given", given | frozenset(k.replace("-", "_") for k in changes))
        return new

    def _node_layout(self, data: dict[str, Any], num_gpus: Any) -> None:
        """A new GPU count over nodes of this scenario's size: whole nodes keep their size (16 GPUs as 2 x 8 become
        4 x 8 at 32) and a shard scope given stays; a count that fills one node or does not split into such nodes
        is one node, sharded over all its GPUs (the node layout it implied is dropped)."""
        per = self.gpus_per_node
        try:
            nodes, rest = divmod(int(num_gpus), per)
        except (TypeError, ValueError):  # parse_scenario names the bad num_gpus
            return
        if self.num_nodes > 1 and nodes > 1 and not rest:
            data["num_nodes"] = nodes
        else:
            data.pop("num_nodes", None)
            data.pop("shard_scope", None)

    def _ckpt_derived(self, changes: dict[str, Any]) -> bool:
        """The old or the new framework (release) derives an unset ``gradient_checkpointing``: its scripts fix it by
        device count (profile ``checkpointing_by_devices``) or it has a default of its own (``default_checkpointing``),
        so it was derived, or is to be. A framework value that does not parse counts as the old one: parse_scenario
        then names it."""
        from vramfit.estimate.framework import profile_for

        new = changes.get("framework", self.framework)
        try:
            new = new if isinstance(new, Framework) else Framework(str(new).strip().lower())
        except ValueError:
            new = self.framework
        version = changes.get("framework_version", self.framework_version)
        old = profile_for(self.framework, self.framework_version)
        return old.derives_checkpointing or profile_for(new, version if isinstance(version, str) else None).derives_checkpointing

    def _keeps(self, follower: str, given: frozenset[str] | None) -> bool:
        """A derived key the user set keeps its value when the key it follows changes: a chosen ``parallelism``
        (but ``none``, the one-GPU default) across GPU counts, a chosen ``precision`` across frameworks and methods,
        a chosen ``quantize`` or stage setting alike; ``sweep --vary`` then gives what
        ``estimate`` gives with those flags (the same error where the kept value does not fit the new one).
        Without the record of given keys (a scenario built field by field), every follower is derived again."""
        # alpha follows its rank; the node count follows the GPU count (a new count is a new layout), and a shard
        # scope given stays where that layout still has several nodes
        if given is None or follower not in given or follower in ("lora_alpha", "num_nodes"):
            return False
        # a value at its schema default (quantize none, one node, ...) is what a scenario written out whole
        # (to_dict) says of every key: it follows, as before; a precision or checkpointing given is kept whatever
        # its value (``estimate`` with the same keys keeps it)
        return follower in ("precision", "gradient_checkpointing") or getattr(self, follower) != _DEFAULTS.get(follower)


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Scenario)}
CH, INT, NUM, BOOL, TXT = Kind.CHOICE, Kind.INTEGER, Kind.NUMBER, Kind.BOOLEAN, Kind.TEXT


def _precision_defaults() -> str:
    """Each framework's default precision per method, read from the framework profiles."""
    from vramfit.estimate.framework import PROFILES

    parts = []
    for fw, prof in PROFILES.items():
        d = dict(prof.default_precision)
        common = max(set(d.values()), key=list(d.values()).count)
        odd = ", ".join(f"{m.value} {p.value}" for m, p in d.items() if p is not common)
        parts.append(f"{fw.value} {common.value}" + (f" ({odd})" if odd else ""))
    return "the framework's: " + "; ".join(parts)


def Field(name: str, kind: Kind, help: str, label: tuple[str, str], **more: Any) -> FieldSpec:  # noqa: N802
    """A table row, its default read from :class:`Scenario`."""
    return FieldSpec(name, kind, help, label, default=_DEFAULTS[name], **more)


#: The scenario's keys, in the order of :class:`Scenario` (a test checks the two agree).
FIELDS: tuple[FieldSpec, ...] = (
    Field("model", TXT, "Model id (catalog or Hugging Face Hub) or path to a config.json.", ("Model", "Modelo"),
          default_note="none: give model or params"),
    Field("params", Kind.COUNT, "Instead of model: a generic dense decoder of this many parameters, e.g. 7B.",
          ("Parameters", "Parâmetros"), unit="parameters", default_note="none: give model or params"),
    Field("method", CH, "What is trained: every weight (full), LoRA adapters on a 16-bit base (lora) or on a "
          "quantized base (qlora).", ("Method", "Método"), choices=Method),
    Field("precision", CH, f"Number formats: bf16-true = {Precision.BF16_TRUE.meaning}; bf16-mixed = "
          f"{Precision.BF16_MIXED.meaning}.", ("Precision", "Precisão"), choices=Precision,
          default_note=_precision_defaults),
    Field("quantize", CH, "Storage of the frozen base weights (qlora needs a quantized one; full and lora keep a "
          "16-bit base).",
          ("Base quantization", "Quantização da base"), choices=Quantize, default_note="nf4-dq for qlora, else none"),
    Field("lora_rank", INT, "LoRA rank r (width of the adapter matrices).", ("Rank r", "Rank r"), limits=(1, MAX_RANK)),
    Field("lora_alpha", NUM, "LoRA scaling alpha (no memory effect).", ("Alpha", "Alpha"), range_note="> 0",
          default_note="2 × lora_rank"),
    Field("lora_targets", Kind.NAMES, "Modules that get adapters: names (q_proj,v_proj) or all-linear.",
          ("Target modules", "Módulos alvo")),
    Field("optimizer", CH, "Optimizer; paged-* keep their state in CUDA managed memory that pages out to host RAM "
          "when the card is full; adamw-8bit is bitsandbytes' AdamW8bit, adamw-8bit-torchao and adamw-4bit torchao's "
          "(a compiled fp32 step per parameter).", ("Optimizer", "Otimizador"), choices=Optimizer),
    Field("optimizer_impl", CH, "torch AdamW implementation (optimizer adamw): fused (one kernel) or foreach "
          "(torch's default when fused is not asked for: HF optim adamw_torch, torchtune fused False; its step copies "
          "the second moment). auto = as the framework release does (hf: fused from transformers 4.54 with torch >= 2.8; "
          "the releases modelled up to 4.53: foreach).",
          ("AdamW implementation", "Implementação do AdamW"), choices=AdamwImpl),
    Field("optimizer_in_backward", BOOL, "Run the optimizer step per parameter during backward (torchtune).",
          ("Optimizer step inside backward", "Passo do otimizador dentro do backward")),
    Field("micro_batch_size", INT, "Sequences per GPU per forward/backward.", ("Micro-batch per GPU", "Micro-batch por GPU"),
          unit="sequences", limits=(1, MAX_BATCH)),
    Field("seq_len", INT, "Tokens per sequence (4k = 4096).", ("Sequence length", "Comprimento de sequência"), unit="tokens",
          limits=(1, MAX_SEQ_LEN)),
    Field("grad_accum", INT, "Micro-batches per optimizer step.", ("Gradient accumulation", "Acumulação de gradientes"),
          unit="micro-batches", limits=(1, MAX_BATCH)),
    Field("gradient_checkpointing", CH, "Recompute in backward: none; every block (full); the attention core only "
          "(selective); torchtitan's op policy, every second matmul output and the attention output saved "
          "(selective-op); or block inputs kept in host RAM (offload, Unsloth's \"unsloth\" mode). Unset: the framework's "
          "own (litgpt's scripts: none on one GPU, full under FSDP; Unsloth: offload, full in its 2024 releases), "
          "else none.", ("Gradient checkpointing", "Checkpointing de gradientes"),
          choices=Checkpointing, default_note="the framework's: none, litgpt by GPU count, unsloth offload"),
    Field("attention", CH, "Attention kernel: sdpa, flash (FlashAttention 2) or eager (seq_len² scores).",
          ("Attention kernel", "Kernel de atenção"), choices=Attention),
    Field("loss", CH, "Loss: standard (full logits), chunked (over the sequence) or fused (no logits: Liger, CCE).",
          ("Loss", "Perda"), choices=Loss),
    Field("num_gpus", INT, "GPUs taking part, each with its own micro-batch (above one node, see the assumptions).",
          ("GPUs", "GPUs"), unit="GPUs", limits=(1, MAX_GPUS)),
    Field("parallelism", CH, "How the work is split over GPUs: DDP, DeepSpeed ZeRO stages or FSDP.",
          ("Sharding", "Fragmentação (sharding)"), choices=Parallelism, default_note="none on one GPU, else ddp (torchtune, litgpt, torchtitan: fsdp)"),
    Field("offload", CH, "CPU offload of optimizer state (and parameters) by ZeRO or FSDP.",
          ("CPU offload", "Descarga para CPU"), choices=Offload),
    Field("gpu", TXT, "GPU id or alias (4090, h200) the run should fit (see `vramfit gpus`).", ("Target card", "Placa alvo"),
          default_note="none (no target card)"),
    Field("framework", CH, "Whose training code runs the step: hf (transformers + PEFT), torchtune, litgpt, "
          "torchtitan or unsloth.",
          ("Framework", "Framework"), choices=Framework),
    Field("lora_dropout", NUM, "LoRA dropout probability.", ("Dropout", "Dropout"), range_note="0 ≤ p < 1",
          default_note="the framework's (0.0 hf/torchtune, 0.05 litgpt)"),
    Field("dora", BOOL, "DoRA (use_dora): a trained magnitude per output of each adapted linear; each "
          "adapted linear's forward builds the whole weight plus B·A for its norm and keeps its base and LoRA outputs "
          "for backward (PEFT with dropout, or before 0.14: a copy of the weight too). LoRA and QLoRA; hf (PEFT) and "
          "torchtune.",
          ("DoRA (weight-decomposed LoRA)", "DoRA (LoRA com decomposição de pesos)")),
    Field("modules_to_save", Kind.NAMES, "PEFT modules_to_save: whole trained copies of embed_tokens and/or lm_head "
          "beside the adapters (what new tokens need), each with its gradient and optimizer state; the originals stay "
          "frozen (Unsloth's offloaded checkpointing moves them to disk). LoRA and QLoRA; hf and unsloth.", ("Fully trained modules", "Módulos treinados por inteiro"),
          default_note="none"),
    Field("compile", BOOL, "torch.compile: of the model and loss, or of each block with an eager loss "
          "where the framework compiles that way (torchtitan).", ("torch.compile (model and loss)",
                                                                 "torch.compile (modelo e perda)")),
    Field("quantize_experts", CH, "QLoRA on mixture-of-experts: quantize the experts too? auto = as the framework "
          "does (transformers 5 + bitsandbytes: no, fused 3-D experts stay unquantized; torchtune, litgpt: yes).",
          ("Quantize MoE experts", "Quantizar os especialistas MoE"), choices=QuantizeExperts),
    Field("deepspeed_config", TXT, "DeepSpeed config (JSON/YAML path, or the mapping) whose zero_optimization keys "
          "size the ZeRO buffers; 'auto' values are filled from the hidden size as the HF Trainer does; its stage and "
          "offload set parallelism and offload.", ("DeepSpeed config", "Configuração do DeepSpeed"),
          default_note="the HF docs' example config (auto buckets)"),
    Field("kbit_prepare", CH, "QLoRA: does prepare_model_for_kbit_training cast norms, embeddings and head to fp32? "
          "auto = as the framework's recipe does (hf: yes; never for GPTQ).",
          ("Upcast for k-bit training", "Conversão para k-bit training"), choices=KbitPrepare),
    Field("use_reentrant", CH, "Gradient checkpointing: torch's reentrant checkpoint (the Trainer's "
          "gradient_checkpointing_kwargs use_reentrant)? auto = as the framework release does (hf: transformers 4 yes, "
          "transformers 5 no; torchtune, litgpt, torchtitan: no). Under FSDP1 LoRA/QLoRA it keeps every block's input "
          "and its gradient until the end of backward.",
          ("Reentrant checkpointing", "Checkpointing reentrante"), choices=UseReentrant),
    Field("framework_version", TXT, "The framework release to model where behaviour changed (hf: transformers-4.44, "
          "transformers-4.40 (4.44's tensors plus a RoPE cache in every Llama/Mistral/Qwen2 attention layer), transformers-4.47, transformers-4.52 (foreach AdamW default, one mask per model), transformers-4.53 (foreach AdamW default), transformers-4.55, peft-0.11, peft-0.13 (DoRA), bitsandbytes-0.43 (4-bit matmul keeps its input), axolotl-0.12, deepspeed-0.8, deepspeed-0.16 (< 0.17.2), deepspeed-0.18 (< 0.18.7), trl-0.29, trl-0.14, trl-0.21 (a 4-bit model's embeddings and head cast back to bf16), llamafactory-0.9 (its own dpo/kto trainers), fsdp-qlora (Answer.AI's train.py launcher), llama-recipes-2023 (July 2023: use_cache left on, the KV cache returned), joined by + when several apply; litgpt: litgpt-2024; "
          "torchtune: torchtune-0.1; torchtitan: torchtitan-0.2.2, torchtitan-0.2.1, torchtitan-2024; unsloth: unsloth-2024.12, unsloth-2024.11 (its Llama 3.2 Vision tower checkpointed), unsloth-2024.8 (mid-2024: its own Triton cross-entropy over the whole logits), unsloth-2024.5 (as 2024.8, RoPE caches of the whole context)).", ("Framework version", "Versão do framework"), default_note="the newest modelled release"),
    Field("fsdp_version", CH, "Which FSDP shards under fsdp/fsdp-grad-op: 1 = FSDP1 flat parameters, 2 = FSDP2 "
          "fully_shard (accelerate's fsdp_version: 2; bf16-mixed = Trainer bf16=True, trainable weights upcast to fp32; "
          "bf16-true = no mixed precision). auto = the framework's (hf: 1; torchtune, torchtitan: 2).",
          ("FSDP version", "Versão do FSDP"), choices=FsdpVersion),
    Field("keeps_outputs", BOOL, "A custom training loop keeps the model's output (its logits) referenced through "
          "backward and the optimizer step (`output = model(...)` dropped after `optimizer.step()`); the HF Trainer and "
          "the torchtune, lit-gpt and torchtitan recipes drop it.", ("Loop keeps the outputs", "O loop mantém as saídas")),
    Field("eval_batch_size", INT, "Sequences per GPU in the evaluation passes run between optimizer steps (HF "
          "per_device_eval_batch_size when eval_strategy is steps or epoch; ms-swift evaluates by default, batch 1), "
          "seq_len tokens each, under no_grad with whole logits; 0 = no evaluation. SFT stage only.",
          ("Eval batch per GPU", "Batch de avaliação por GPU"), unit="sequences", limits=(0, MAX_BATCH)),
    Field("logits_to_keep", CH, "Positions the model computes logits and the loss for: all, or only the label "
          "positions (ms-swift >= 3.5 with one row per forward, micro-batch 1 or packing/padding_free: a boolean "
          "logits_to_keep mask, in training and evaluation), label_share of the tokens.",
          ("Logits computed at", "Logits calculados em"), choices=LogitsToKeep),
    Field("label_share", NUM, "Share of each sequence's tokens that carry a label (the answer tokens of an "
          "instruction data set); sizes the logits with logits_to_keep labels, no effect otherwise.",
          ("Share of label tokens", "Fração de tokens com rótulo"), range_note="0 < share ≤ 1"),
    *STAGE_FIELDS(Field, CH, INT, NUM, BOOL),
    Field("num_nodes", INT, "Machines the GPUs are spread over (num_gpus / num_nodes GPUs each).",
          ("Nodes", "Nós"), unit="nodes", limits=(1, MAX_GPUS)),
    Field("shard_scope", CH, "Over which GPUs ZeRO-3/FSDP shard: all (every rank) or node (shard inside a node, "
          "replicate across nodes: FSDP HSDP, DeepSpeed ZeRO++ hpZ).", ("Sharding scope", "Escopo da fragmentação"),
          choices=ShardScope),
    Field("interconnect", CH, "Network between nodes (auto: the card's usual node, else 100 GbE); "
          "rates and sources in data/interconnects.csv.", ("Network between nodes", "Rede entre nós"),
          choices=Interconnect),
    *LAYOUT_FIELDS(Field, CH, INT, MAX_GPUS),
    Field("images_per_sample", INT, "Vision-language models: images in each sequence; their tokens (the model's "
          "processor rule) are added to seq_len and the vision tower runs on them.", ("Images per sample",
                                                                                 "Imagens por amostra"),
          unit="images", limits=(0, 256)),
    Field("image_height", INT, "Height of each image in pixels, before the processor resizes or tiles it.",
          ("Image height", "Altura da imagem"), unit="pixels", limits=(1, 16384)),
    Field("image_width", INT, "Width of each image in pixels, before the processor resizes or tiles it.",
          ("Image width", "Largura da imagem"), unit="pixels", limits=(1, 16384)),
    Field("frames_per_sample", INT, "Vision-language models: video frames in each sequence (one video, as the "
          "processor samples it; image_height x image_width each); Qwen2/2.5/3-VL pack 2 frames per temporal patch.",
          # the bound: Qwen2VLVideoProcessor / Qwen3VLVideoProcessor max_frames = 768 (transformers v5.24.0)
          ("Video frames per sample", "Quadros de vídeo por amostra"), unit="frames", limits=(0, 768)),
    Field("freeze_vision", CH, "Vision-language models: keep the vision tower and projector frozen? auto = as the "
          "framework does (hf, unsloth: trained; full fine-tuning trains it, PEFT all-linear adapts its linears).",
          ("Freeze the vision tower", "Congelar a torre de visão"), choices=FreezeVision),
    Field("quantize_vision", CH, "QLoRA on a vision-language model: quantize the vision tower and projector too? "
          "auto = as the framework does (hf: yes, bitsandbytes replaces every linear but the head; unsloth: no, its "
          "dynamic 4-bit checkpoints keep the vision layers 16-bit).",
          ("Quantize the vision tower", "Quantizar a torre de visão"), choices=QuantizeVision),
    Field("moe_kernel", CH, "Mixture-of-experts: what runs the experts? none = the model's own forward at the framework "
          "version (transformers-4.55 gpt-oss: a per-expert loop that copies each expert's weights); megablocks = the "
          "kernels hub's MegaBlocksMoeMLP (use_kernels=True on a model loaded on the GPU).",
          ("MoE experts kernel", "Kernel dos especialistas MoE"), choices=MoeKernel),
)
del CH, INT, NUM, BOOL, TXT, Field

FIELD: dict[str, FieldSpec] = {f.name: f for f in FIELDS}
SCENARIO_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Scenario))

#: Scenario keys whose values are a finite set -> the enum that lists them.
CHOICE_KEYS: dict[str, type[_Choice]] = {f.name: f.choices for f in FIELDS if f.choices is not None}
#: Whole-number keys -> their inclusive (min, max), as parse_scenario enforces them.
INT_LIMITS: dict[str, tuple[int, int]] = {
    f.name: (int(f.limits[0]), int(f.limits[1])) for f in FIELDS if f.kind is Kind.INTEGER and f.limits
}
#: Boolean switches.
BOOL_KEYS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind is Kind.BOOLEAN)
_ENUM_KEYS = CHOICE_KEYS  # older private names, kept for callers not yet moved
_INT_LIMITS = INT_LIMITS


def k_tokens(text: str) -> str:
    """A sequence length written with k: "4k" context = 4096 tokens (Llama-2's "4k" is 4096 positions), for every
    option that is a sequence length (seq_len, the dataset's max_length); other counts read k as 1,000."""
    return str(int(text[:-1]) * 1024) if text[-1:] in ("k", "K") and text[:-1].isascii() and text[:-1].isdigit() else text


def _as_int(key: str, value: Any) -> int:
    lo, hi = INT_LIMITS[key]
    if isinstance(value, bool):
        raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {shown(value)}")
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        ascii_digits(key, text, f"an integer from {lo} to {hi}")
        if key == "seq_len":
            text = k_tokens(text)
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {shown(value)}") from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ScenarioError(key, f"must be a whole number from {lo} to {hi}, got {shown(value)}")
        value = int(value)
    if not isinstance(value, int):
        raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {shown(value)}")
    if not lo <= value <= hi:
        raise ScenarioError(key, f"must be from {lo} to {hi}, got {shown(value)}")
    return value


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.strip().lower() in ("true", "1", "yes", "on")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ScenarioError(key, f"must be true or false, got {shown(value)}", ["true", "false"])


def _as_enum(key: str, value: Any) -> _Choice:
    enum = CHOICE_KEYS[key]
    if isinstance(value, enum):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and key == "fsdp_version":
        value = str(value)  # YAML/JSON write the version as a number (accelerate's `fsdp_version: 2`)
    if isinstance(value, str):
        text = value.strip().lower()
        for member in enum:
            if member.value == text:
                return member
    if key == "gradient_checkpointing" and isinstance(value, bool):
        return Checkpointing.FULL if value else Checkpointing.NONE
    raise ScenarioError(key, f"unknown value {shown(value)}", enum.values())


def _as_targets(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ScenarioError(
            "lora_targets", f"must be a list of module names or 'all-linear', got {shown(value)}"
        )
    names: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip() or not item.replace("_", "").replace(
            ".", ""
        ).replace("-", "").isalnum():
            raise ScenarioError(
                "lora_targets",
                f"{shown(item)} is not a module name (e.g. q_proj, v_proj, all-linear)",
            )
        names.append(item.strip())
    if not names:
        raise ScenarioError("lora_targets", "must name at least one module or 'all-linear'")
    if ALL_LINEAR in names and len(names) > 1:
        extra = [n for n in names if n != ALL_LINEAR]
        if any(n not in ("lm_head", "embed_tokens") for n in extra):
            raise ScenarioError("lora_targets", "'all-linear' cannot be combined with block module names")
    return tuple(dict.fromkeys(names))


def _as_saved_modules(value: Any) -> tuple[str, ...]:
    """``modules_to_save`` as a tuple of :data:`SAVED_MODULES` names (a list, or one comma-separated string; empty: none)."""
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ScenarioError("modules_to_save", f"must be a list of module names, got {shown(value)}",
                            list(SAVED_MODULES))
    names = [item.strip() if isinstance(item, str) else item for item in items]
    for name in names:
        if name not in SAVED_MODULES and name != "":
            raise ScenarioError("modules_to_save", f"{shown(name)} is not a module trained as a whole copy here",
                                list(SAVED_MODULES))
    return tuple(dict.fromkeys(n for n in names if n))


def finite_number(key: str, value: Any, what: str = "a number") -> float:
    """A finite float from a number or a numeric string (never a bool), else ScenarioError."""
    return to_float(key, value, what)  # ints >= 10^309, NaN, inf, huge digit strings: vramfit.safe_input


def positive_number(key: str, value: Any, hi: float = math.inf, what: str = "a positive number") -> float:
    """A finite number > 0 (and <= ``hi``) from a number or a numeric string, else ScenarioError."""
    out = finite_number(key, value, what)
    if out <= 0 or out > hi:
        raise ScenarioError(key, f"must be {what}" + (f" up to {hi:g}" if math.isfinite(hi) else "") + f", got {shown(value)}")
    return out


def fraction(key: str, value: Any, lo_open: bool) -> float:
    """A number in (0, 1] (``lo_open``) or [0, 1)."""
    out = finite_number(key, value)
    if not ((0 < out <= 1) if lo_open else (0 <= out < 1)):
        rng = "above 0 and at most 1" if lo_open else "from 0 up to (not including) 1"
        raise ScenarioError(key, f"must be a fraction {rng}, got {shown(value)}")
    return out


@cache
def _field_names() -> tuple[str, ...]:
    """The scenario's keys in declaration order (``dataclasses.fields`` rebuilds them on every call)."""
    return tuple(f.name for f in fields(Scenario))


def parse_scenario(data: Any) -> Scenario:
    """Validate a mapping of scenario keys into a :class:`Scenario`.

    Accepts CLI-style dashed keys too (``micro-batch-size``). Unknown keys, missing model,
    bad values and incompatible combinations raise :class:`ScenarioError`.
    """
    if isinstance(data, Scenario):
        return data
    if data is None:  # an empty YAML file reads as None
        raise ScenarioError("scenario", "is empty: give a mapping of scenario keys such as model: meta-llama/Llama-2-7b-hf")
    if not isinstance(data, dict):
        raise ScenarioError("scenario", f"must be a mapping of scenario keys, got {type(data).__name__}")
    raw = _normalized_keys(data)
    kw = _typed_values(raw)
    _set_model_or_params(raw, kw)
    _set_precision_and_quantize(kw)
    _set_framework_keys(raw, kw)
    _set_parallelism_and_offload(kw)
    check_stage_keys(kw, raw)
    _set_gpu(raw, kw)
    sc = Scenario(**kw)
    object.__setattr__(sc, "_given", frozenset(raw))  # the keys set, not derived (Scenario.replace keeps them)
    return sc


def key_once(spelled: dict[str, str], norm: str, key: str) -> None:
    """Note that ``key`` (spelled as given) names the field ``norm``; the same field named twice (``seq-len`` and
    ``seq_len``) is refused naming both, rather than one value silently winning."""
    if norm in spelled:
        raise ScenarioError(norm, f"is given twice, as {shown(spelled[norm])} and {shown(key)}; give it once")
    spelled[norm] = key


def _normalized_keys(data: dict) -> dict[str, Any]:
    """The given keys as scenario field names (dashes to underscores), unknown keys refused, None values dropped."""
    raw: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ScenarioError(key_label(key), "keys must be strings", SCENARIO_KEYS)
        norm = key.strip().replace("-", "_")
        if norm not in SCENARIO_KEYS:
            raise ScenarioError(key_label(key), "unknown scenario key", SCENARIO_KEYS)  # never echo file text
        key_once(spelled, norm, key)
        if value is not None:
            raw[norm] = value
    return raw


def _typed_values(raw: dict[str, Any]) -> dict[str, Any]:
    """The choice, integer, boolean and LoRA keys converted to their types (lora_alpha defaults to 2 x rank)."""
    kw: dict[str, Any] = {}
    for key in CHOICE_KEYS:
        if key in raw:
            kw[key] = _as_enum(key, raw[key])
    for key in INT_LIMITS:
        if key in raw:
            kw[key] = _as_int(key, raw[key])
    for key in BOOL_KEYS:
        if key in raw:
            kw[key] = _as_bool(key, raw[key])
    if "lora_targets" in raw:
        kw["lora_targets"] = _as_targets(raw["lora_targets"])
    if "modules_to_save" in raw:
        kw["modules_to_save"] = _as_saved_modules(raw["modules_to_save"])
    if "lora_dropout" in raw:
        kw["lora_dropout"] = fraction("lora_dropout", raw["lora_dropout"], lo_open=False)
    if "label_share" in raw:
        kw["label_share"] = fraction("label_share", raw["label_share"], lo_open=True)
    if "lora_alpha" in raw:
        kw["lora_alpha"] = positive_number("lora_alpha", raw["lora_alpha"])
    else:
        kw["lora_alpha"] = 2.0 * kw.get("lora_rank", Scenario.lora_rank)
    return kw


def _set_model_or_params(raw: dict[str, Any], kw: dict[str, Any]) -> None:
    """Exactly one of model (a non-empty id or path) and params (a parameter count)."""
    model = raw.get("model")
    params = raw.get("params")
    if model is not None and params is not None:
        raise ScenarioError("model", "give either model or params, not both")
    if model is None and params is None:
        raise ScenarioError("model", "is required (a catalog/Hub id or a config.json path), or give params")
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            raise ScenarioError("model", f"must be a non-empty string, got {shown(model)}")
        kw["model"] = model.strip()
    if params is not None:
        kw["params"] = parse_param_count(params)


def _set_precision_and_quantize(kw: dict[str, Any]) -> None:
    """Default precision (the framework's) and quantization (by method); refuse quantize values the method cannot use."""
    method = kw.get("method", Method.LORA)
    if "precision" not in kw:  # what a user of the framework gets by default (its profile says, with sources)
        from vramfit.estimate.framework import profile_for

        kw["precision"] = dict(profile_for(kw.get("framework", Framework.HF)).default_precision)[method]
    if "quantize" not in kw:
        kw["quantize"] = Quantize.NF4_DQ if method is Method.QLORA else Quantize.NONE
    elif method is Method.QLORA and kw["quantize"] is Quantize.NONE:
        raise ScenarioError(
            "quantize", "qlora needs a quantized base", [q for q in Quantize.values() if q != "none"]
        )
    elif method is Method.FULL and kw["quantize"] is not Quantize.NONE:
        raise ScenarioError("quantize", "full fine-tuning trains every weight, so the base cannot be quantized", ["none"])
    elif method is Method.LORA and kw["quantize"] is not Quantize.NONE:
        raise ScenarioError("quantize", f"lora trains adapters on a 16-bit base; adapters on a {kw['quantize'].value} "
                            "base are method qlora", ["none"])


def _set_framework_keys(raw: dict[str, Any], kw: dict[str, Any]) -> None:
    """Keys read from a DeepSpeed config, and the framework version checked against the framework."""
    if "deepspeed_config" in raw:
        from vramfit.estimate.deepspeed import scenario_keys

        scenario_keys(raw["deepspeed_config"], kw)
    if "framework_version" in raw:
        from vramfit.estimate.framework import check_version

        kw["framework_version"] = check_version(kw.get("framework", Framework.HF), raw["framework_version"])


def framework_profile(framework: Framework | None, version: str | None) -> Any:
    """The profile of ``framework`` (None: hf) at its release ``version``, read lazily as the framework defaults above
    are: the core's way to a framework's typed data (stage_keys: the least KTO batch of the trainer it runs)."""
    from vramfit.estimate.framework import profile_for

    return profile_for(framework or Framework.HF, version)


def _set_parallelism_and_offload(kw: dict[str, Any]) -> None:
    """Default parallelism by GPU count; offload, nodes and shard scope only with an engine that supports them."""
    num_gpus = kw.get("num_gpus", 1)
    if "parallelism" not in kw:
        from vramfit.estimate.framework import multi_gpu_default

        kw["parallelism"] = Parallelism.NONE if num_gpus == 1 else multi_gpu_default(kw)
    elif num_gpus == 1 and kw["parallelism"] is not Parallelism.NONE and kw["parallelism"] is not Parallelism.DDP:
        # ZeRO/FSDP on one GPU is legal (DeepSpeed runs it) and shards nothing; keep it.
        pass
    elif num_gpus > 1 and kw["parallelism"] is Parallelism.NONE:
        raise ScenarioError(
            "parallelism", f"{num_gpus} GPUs need a way to split the work", [p for p in Parallelism.values() if p != "none"]
        )
    from vramfit.estimate.framework import check_parallelism, profile_for

    profile = profile_for(kw.get("framework", Framework.HF), kw.get("framework_version"))
    if "gradient_checkpointing" not in kw:  # what the scripts run, else the framework's default (profile_fields.py)
        kw["gradient_checkpointing"] = profile.unset_checkpointing(num_gpus)
    check_parallelism(kw)
    offload = kw.get("offload", Offload.NONE)
    if offload is not Offload.NONE and kw["parallelism"] is Parallelism.FSDP_NO_SHARD:
        raise ScenarioError("offload", "CPU offload under FSDP NO_SHARD is not modelled; shard with fsdp to offload",
                            ["none"])
    if offload is Offload.OPTIMIZER and kw["parallelism"] in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP):
        # torch FSDP1 CPUOffload(offload_params=True) and FSDP2 CPUOffloadPolicy move the parameters and gradients with
        # the state; accelerate's fsdp_offload_params, torchtune's fsdp_cpu_offload and torchtitan's enable_cpu_offload
        # set nothing else (property sweep, 2026-12-07: fsdp + optimizer was counted as a run no FSDP makes)
        raise ScenarioError("offload", "FSDP's CPU offload moves the parameters and gradients with the optimizer state: "
                            "optimizer-only offload is DeepSpeed ZeRO's (zero1, zero2, zero3)",
                            ["none", "optimizer+params"] if kw["parallelism"] is Parallelism.FSDP else ["none"])
    if offload is not Offload.NONE and kw["parallelism"] not in (
        Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP
    ):
        raise ScenarioError(
            "offload",
            "CPU offload of model state is done by ZeRO or FSDP; set parallelism to one of them",
            ["zero1", "zero2", "zero3", "fsdp", "fsdp-grad-op"],
        )
    _check_nodes(kw)
    check_layout_keys(kw)
    from vramfit.estimate.framework import check_loss_chunks

    check_loss_chunks(kw, profile)  # after the layout's own seq_len rule (context parallel's 2 x degree)
    if offload is Offload.OPTIMIZER_PARAMS and kw["parallelism"] not in (Parallelism.ZERO3, Parallelism.FSDP):
        raise ScenarioError("offload", "parameter offload needs fully sharded parameters", ["zero3", "fsdp"])
    if kw.get("fsdp_version", FsdpVersion.AUTO) is not FsdpVersion.AUTO:
        from vramfit.estimate.framework import check_fsdp_version

        check_fsdp_version(kw)


def _set_gpu(raw: dict[str, Any], kw: dict[str, Any]) -> None:
    """The GPU id, trimmed and lower-cased."""
    if "gpu" in raw:
        gpu = raw["gpu"]
        if not isinstance(gpu, str) or not gpu.strip():
            raise ScenarioError("gpu", f"must be a GPU id, got {shown(gpu)}")
        # the id is checked against the catalog where the card is used (estimate, fit, plan):
        # validating a scenario reads no catalog or user file
        kw["gpu"] = gpu.strip().lower()


def _check_nodes(kw: dict[str, Any]) -> None:
    """num_nodes divides num_gpus; shard_scope=node needs a sharding engine that has a hybrid mode."""
    num_gpus, nodes = kw.get("num_gpus", 1), kw.get("num_nodes", 1)
    if num_gpus % nodes:
        divs = [d for d in range(1, num_gpus + 1) if num_gpus % d == 0][:12]
        raise ScenarioError("num_nodes", f"must divide num_gpus ({num_gpus}) into equal nodes", [str(d) for d in divs])
    hybrid = (Parallelism.ZERO3, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)
    if kw.get("shard_scope") is ShardScope.NODE and kw["parallelism"] not in hybrid:
        raise ScenarioError("shard_scope", "sharding inside a node needs zero3 (hpZ), fsdp or fsdp-grad-op (HSDP)",
                            ["all"])


def load_scenario_file(path: str | Path) -> Scenario:
    """Read a YAML or JSON scenario file (bounded and checked by :func:`vramfit.safe_input.load_data_file`)."""
    return parse_scenario(load_data_file("scenario", path))
