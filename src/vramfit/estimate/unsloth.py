"""The Unsloth framework profile, and the 2024.12 release that produced its published long-context tables.

Unsloth's README tables ("Context length benchmarks", added in unslothai/unsloth@3e9ed3cc on 2025-01-14 from
the Llama 3.3 blog of 2024-12-10) were measured with Unsloth 2024.12.x: unslothai/unsloth@0e0d8fc ("Llama 3.3",
2024-12-06, ``__version__ = "2024.12.3"``) with unslothai/unsloth-zoo@bb133c7 (2024-12-07). That code keeps
different tensors from today's (the default profile, unsloth@015bdef): Apple's Cut Cross-Entropy instead of
Unsloth's own fused loss, the first offloaded checkpointer, out-of-place LoRA products and a RoPE cache per
layer. ``framework_version: unsloth-2024.12`` selects it.
"""

from __future__ import annotations

from vramfit.estimate.allocator import parse_alloc_conf
from vramfit.estimate.constants import UNSLOTH_ROPE_GROWTH, UNSLOTH_ROPE_INITIAL_ROWS
from vramfit.estimate.profile_fields import (
    ForcedFp32,
    FrameworkProfile,
    FrameworkVersion,
    LossLayout,
    OptimizerImpl,
    SavedCopyDtype,
)
from vramfit.models.spec import ModelSpec, PositionEncoding
from vramfit.scenario import Checkpointing, Method, Precision, Quantize, Scenario

# unslothai/unsloth-zoo@ce232d6c unsloth_zoo/model_lists.py FORCE_FLOAT32 (re-exported, with the same fallback list, by
# unslothai/unsloth@015bdef models/loader.py l. 120-141), as the config model types its loader matches: an entry
# equals the type with "_" removed or is a substring of the comma-joined types (loader.py l. 1812-1817; "gemma3,"
# keeps gemma3n out, "gemma4" catches gemma4_text, "glm4_moe" glm4_moe_lite, "qwen3_5" qwen3_5_moe). FastLanguageModel
# hands every one of them to FastModel (loader.py l. 882-907), where the scan runs.
_GEMMA3 = ForcedFp32(residual=True, mlp=True)
FORCE_FLOAT32: tuple[tuple[str, ForcedFp32], ...] = (
    # unsloth-zoo@ce232d6c temporary_patches/gemma.py (l. 554, 641 and the 2025.6 release's e8c8beae alike):
    # Gemma3TextScaledWordEmbedding returns `.to(torch.float32)` (fp32 + fp16 adds keep the stream fp32), Gemma3RMSNorm
    # returns fp16, Gemma3MLP upcasts the gate_proj and up_proj outputs to fp32 for act_fn and the product;
    # unsloth-zoo compiler.py get_transformers_model_type adds "gemma3" for a "gemma3_text" config
    ("gemma3", _GEMMA3),
    ("gemma3_text", _GEMMA3),
    # temporary_patches/qwen3_moe_float32.py: Qwen3MoeDecoderLayer `residual = hidden_states.to(torch.float32)` (the
    # stream fp32), Qwen3MoeRMSNorm returns fp16, Qwen3MoeAttention `.to(torch.float32)` on q, k (after q/k norm) and
    # v, RoPE and SDPA in fp32, `attn_output.to(torch.float16)` into o_proj; "MoE experts / router are untouched"
    ("qwen3_moe", ForcedFp32(residual=True, attention=True)),
    # temporary_patches/gpt_oss.py: under UNSLOTH_FORCE_FLOAT32 the 4-bit experts run torch_native_forward
    # (l. 2064-2065), `swiglu_torch_forward(gate_up, ..., dtype = torch.float32)` and down_proj with autocast off
    # on the fp32 product, `next_states` fp32 (l. 1975-2002; the bnb path l. 998-1003 alike), so the stream is fp32
    # from the first MoE output on; loader.py l. 1717-1733 sets down_projs' compute dtype to fp32
    ("gpt_oss", ForcedFp32(residual=True, mlp=True)),
    # listed for the loader's scan; their float32 patches (gemma3n.py, gemma4_float32.py, glm4_moe.py, the
    # qwen3_5 GDN layers) are not read and no catalog model has these types: the 16-bit layout without autocast
    ("gemma3n", ForcedFp32()),
    ("gemma3n_text", ForcedFp32()),
    ("gemma4", ForcedFp32()),
    ("gemma4_text", ForcedFp32()),
    ("glm4_moe", ForcedFp32()),
    ("glm4_moe_lite", ForcedFp32()),
    ("qwen3_5", ForcedFp32()),
    ("qwen3_5_text", ForcedFp32()),
    ("qwen3_5_moe", ForcedFp32()),
    ("qwen3_5_moe_text", ForcedFp32()),
)

#: get_peft_model(use_gradient_checkpointing=True) before unsloth@1b28ec31f7 (2025-07-17; tags December-2024 through
#: July-2025 models/llama.py get_peft_model), which prepare_model_for_kbit_training turns into transformers' own
#: gradient_checkpointing_enable() (December-2024 models/_utils.py l. 535-548; only "unsloth" offloads)
_TRUE_CHECKPOINTING = ("default_checkpointing", Checkpointing.FULL)

#: get_peft_model made a whole trained copy of ``lm_head`` named in target_modules, as of ``embed_tokens`` (unsloth@0e0d8fc
#: models/llama.py l. 2072-2079 ``if module == "lm_head": train_lm_head = True ... modules_to_save.append("lm_head")``;
#: unsloth@7e7656c5a1 l. 2047 the same) until unsloth@b7ec64c96f (2026-03-03, "[Fix] lm_head lora save")
_LM_HEAD_TARGET_COPIED = ("targets_trained_as_copies", ("embed_tokens", "lm_head"))

UNSLOTH_2024_12 = FrameworkVersion(
    "unsloth-2024.12",
    "unslothai/unsloth@0e0d8fc (2024.12.3) + unslothai/unsloth-zoo@bb133c7: Apple Cut Cross-Entropy loss, "
    "Unsloth_Offloaded_Gradient_Checkpointer, matmul_lora's out-of-place LoRA product, a RoPE cache per layer",
    (
        # unsloth@0e0d8fc models/llama.py CausalLM_fast_forward: `if not RETURN_LOGITS and HAS_CUT_CROSS_ENTROPY
        # and labels is not None: loss = fused_linear_cross_entropy(hidden_states, lm_head, labels, ...)`
        ("standard_loss", LossLayout.APPLE_CCE),
        # unsloth-zoo@bb133c7 unsloth_zoo/gradient_checkpointing.py Unsloth_Offloaded_Gradient_Checkpointer: forward
        # keeps only `hidden_states.to("cpu")`; backward copies it back (the norm's saved input, counted with the
        # block), recomputes and holds `output` through `torch.autograd.backward(output, dY)`, with dY alive. Third:
        # the embedding output, a leaf once enable_input_require_grads has run (unsloth@0e0d8fc models/_utils.py
        # prepare_model_for_kbit_training, use_reentrant=True), held by its AccumulateGrad node (torch
        # csrc/autograd/functions/accumulate_grad.h `Variable variable`) until backward ends. No prefetched input.
        ("offload_ckpt_block_tensors", 3),
        ("offload_ckpt_prefetched", 0),
        ("lora_product_temporary", True),
        ("rope_cache_per_layer", True),
        ("step_allocation_order", True),
        # unsloth@0e0d8fc unsloth/__init__.py (torch >= 2.2), on import: "Reduce VRAM usage by reducing
        # fragmentation"; moved into unsloth-zoo by unsloth@1c1f7033cd (2025-10-26), see UNSLOTH_PROFILE below
        ("alloc_conf", parse_alloc_conf(
            "expandable_segments:True,roundup_power2_divisions:[64:128,256:64,>:32]")),
        # before Gemma 3 and FORCE_FLOAT32 (unsloth@49eece4d94, 2025-03-18)
        ("fp16_forced_fp32", ()),
        _TRUE_CHECKPOINTING,
        _LM_HEAD_TARGET_COPIED,
    ),
)

UNSLOTH_2024_11 = FrameworkVersion(
    "unsloth-2024.11",
    "unslothai/unsloth@7e7656c5a1 (2024.11.9, the first FastVisionModel) on transformers 4.46.2: for_training sets "
    "gradient_checkpointing on every module that has it (unsloth/models/vision.py l. 384-390), and transformers "
    "4.46.2's MllamaVisionEncoder then checkpoints its layers (models/mllama/modeling_mllama.py l. 381-386); only "
    "this vision-tower behaviour is modelled, the language path is today's",
    # its mapper loads unsloth/Llama-3.2-11B-Vision-Instruct-bnb-4bit, a plain bitsandbytes checkpoint with the tower
    # quantized (unsloth@7e7656c5a1 mapper.py l. 463-465; UNSLOTH_VLM_NB-4's 5.00 + 2.18 GB of shards), before the
    # dynamic 4-bit checkpoints
    (("vision_v4_checkpointing", True), ("fp16_forced_fp32", ()), ("qlora_quantizes_vision", True), _TRUE_CHECKPOINTING,
     _LM_HEAD_TARGET_COPIED),
)

#: what the mid-2024 releases share with 2024.12 (helper reading of unslothai/unsloth, 2026-12-05): the same
#: Unsloth_Offloaded_Gradient_Checkpointer (unsloth@0927c34 models/_utils.py l. 765-799, text identical to
#: unsloth-zoo@bb133c7's; the embedding output a leaf through enable_input_require_grads, _utils.py l. 414-416),
#: matmul_lora's out-of-place product (kernels/utils.py l. 285 ``out += (X @ A.to(dtype)) @ (s * B.to(dtype))``), a
#: RoPE cache per attention layer (_utils.py l. 966-1046), no forced fp32; before Cut Cross-Entropy, Unsloth's own
#: Triton cross-entropy over the model-dtype logits (models/llama.py l. 911-931, estimate/loss.py _unsloth_triton_ce),
#: and ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` set on import for torch >= 2.2 (unsloth/__init__.py l. 53-54;
#: deleted for torch 2.0/2.1, l. 71-80; the power-of-two divisions came in ddf118a8fc, 2024-11-21). The step is not
#: replayed event by event (``step_allocation_order``): step_events describes 2024.12's CCE and flash-attn.
_MID_2024 = (
    ("standard_loss", LossLayout.UNSLOTH_TRITON_CE),
    ("offload_ckpt_block_tensors", 3),
    ("offload_ckpt_prefetched", 0),
    ("lora_product_temporary", True),
    ("rope_cache_per_layer", True),
    ("alloc_conf", parse_alloc_conf("expandable_segments:True")),
    ("fp16_forced_fp32", ()),
    _TRUE_CHECKPOINTING,
    # before unsloth@539fcea071 (2024-10-28) every modules_to_save copy was cast to fp32 (unsloth@0927c34 models/llama.py
    # l. 1996-2010 "Casting embed_tokens to float32"), so the head's logits for the Triton cross-entropy came out in
    # fp32 (``self.lm_head(hidden_states.to(lm_head.dtype))``); that loss layout is not modelled for an fp32 head: refused
    ("runs_modules_to_save", False),
)

UNSLOTH_2024_8 = FrameworkVersion(
    "unsloth-2024.8",
    "unslothai/unsloth@0927c34 (2024.8, 2024-08-19; the same memory layout from f8a9421721, 2024-07-18, through "
    "2024.9.post4): Unsloth's Triton cross-entropy over model-dtype logits (gradient written over them), the offloaded "
    "checkpointer, out-of-place LoRA products, a RoPE cache per layer from 4 x 8192 rows, expandable_segments",
    _MID_2024,
)

UNSLOTH_2024_5 = FrameworkVersion(
    "unsloth-2024.5",
    "unslothai/unsloth@4773950b65 (2024.5-2024.6 and 2024.7 before 2024-07-18): as unsloth-2024.8, but each layer's RoPE "
    "cache holds max(max_seq_length, max_position_embeddings) rows from the start and is never regrown",
    (*_MID_2024, ("rope_cache_full_context", True)),
)

UNSLOTH_PROFILE = FrameworkProfile(
    name="unsloth",
    # unsloth@015bdef unsloth/models/_utils.py prepare_model_for_kbit_training ->
    # unsloth_zoo prepare_model_for_training(train_layernorms=False, train_embedding=False,
    # train_lm_head=False, float32_mixed_precision=True): the trainable LoRA A/B become fp32, the
    # only fp32 tensors (norms, embeddings, lm_head stay in the load dtype)
    adapters_fp32=True,
    lora_casts_input=False,  # fast_lora.py matmul_lora casts A, B to X.dtype, never X
    runs_compile=False,  # its kernels and its own compiled modules, no torch.compile of the model: profile_fields.py
    runs_chunked_loss=False,  # its own fused cross-entropy is the loss (profile_fields.py)
    lora_dropout_default=0.0,  # FastLanguageModel.get_peft_model(lora_dropout=0): the fast path needs 0
    fused_qkv_lora=False,
    rmsnorm_upcast=True,
    expands_kv_for_sdpa=False,  # flash-attn varlen / SDPA with GQA (llama.py LlamaAttention_fast_forward)
    flash_fallback_repeats_kv=True,  # xformers with full-head k and v below Ampere (profile_fields.py)
    fallback_attention_model_types=("llama", "mistral", "gemma", "qwen2", "qwen3"),
    # its own prepare_model_for_kbit_training (above) leaves norms, embeddings, lm_head 16-bit
    qlora_unquantized_fp32=False,
    qlora_saves_input=False,
    qlora_quantizes_lm_head=False,
    standard_loss=LossLayout.UNSLOTH_FUSED_CE,
    torch_optimizer_impl=OptimizerImpl.FUSED,  # runs the HF Trainer (see the hf profile)
    rmsnorm_kernel=True,
    lora_fused_autograd=True,
    offload_ckpt_block_tensors=5,
    offload_ckpt_prefetched=0,  # the input comes back into one GPU_BUFFER when its block's backward starts
    # FastLanguageModel.from_pretrained(dtype=None) picks bf16 where supported, no fp32 master copy
    default_precision=((Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE),
                       (Method.QLORA, Precision.BF16_TRUE)),
    pixels_in_model_dtype=True,  # UnslothVisionDataCollator casts them (profile_fields.py)
    fp16_forced_fp32=FORCE_FLOAT32,
    forced_fp32_loads_bf16=True,  # load in bf16, cast to fp16 module by module (estimate/cast_load.py)
    # load_in_4bit maps a vision-language model to Unsloth's dynamic checkpoint (unsloth@015bdef mapper.py l. 684-688
    # Qwen2.5-VL-7B, l. 729-733 Gemma 3 4B, l. 1201 Qwen3-VL-8B: "...-unsloth-bnb-4bit"), whose quantization_config
    # keeps the vision layers 16-bit: Unsloth in vllm-project/vllm#30921 (Qwen3-VL-2B-Instruct-unsloth-bnb-4bit: "all of
    # the vision layers are left unquantized, while having only a few language layers in half precision"; those
    # language layers are not listed, so not modelled; Qwen2.5-VL-7B's list, which its GRPO notebook's vLLM load prints,
    # unslothai/notebooks@bdda2efc nb/Qwen2_5_7B_VL_GRPO.ipynb, holds the tower's blocks and no language layer) and
    # unslothai/unsloth-zoo@17593492 (Gemma 3's pre-quantized
    # checkpoints: "vision_tower weights load as bfloat16"). Its own on-the-fly quantization skips the projector and
    # mergers (unsloth-zoo@ce232d6c peft_utils.py SKIP_QUANTIZATION_MODULES: multi_modal_projector, merger,
    # modality_projection, vision_tower); quantize_vision yes describes a plain "-bnb-4bit" checkpoint
    qlora_quantizes_vision=False,
    # FastLanguageModel.get_peft_model and FastBaseModel.get_peft_model default use_gradient_checkpointing="unsloth"
    # (unsloth@015bdef models/llama.py l. 3079, models/vision.py l. 1869; since unsloth@1b28ec31f7, 2025-07-17): the
    # offloaded checkpointer
    default_checkpointing=Checkpointing.OFFLOAD,
    # modules_to_save: PEFT's wrapper around the embedding / head (get_peft_model passes modules_to_save to LoraConfig,
    # models/llama.py l. 3449, models/vision.py l. 2060-2066), each copy trained in fp32 where the load is fp16
    runs_modules_to_save=True,
    saved_copy_dtype=SavedCopyDtype.FP16_AS_FP32,
    # FastLlamaModel.get_peft_model (models/llama.py l. 3466-3480; unsloth@0e0d8fc l. 2176-2190 the same): ``if
    # use_gradient_checkpointing == "unsloth"`` (offloaded checkpointing), offload_input_embeddings /
    # offload_output_embeddings (models/_utils.py l. 2809-2855: torch.save, then torch.load(mmap=True) on the CPU)
    # replace the embedding / head to be trained before PEFT copies them, so only the copy (moved to the GPU by
    # _offload_frozen_module_for_training) is on the card; with checkpointing True or off the originals stay. The
    # model types loader.py hands to FastLlamaModel's subclasses (l. 828-890); every other type, and an 8-bit load
    # (l. 487 ``if load_in_8bit or full_finetuning ...``), goes to FastModel, whose get_peft_model (models/vision.py
    # l. 1855-2140) offloads nothing
    saved_originals_to_disk_under=Checkpointing.OFFLOAD,
    saved_originals_to_disk_model_types=("llama", "mistral", "gemma", "gemma2", "qwen2", "qwen3"),
    saved_originals_to_disk_quantizations=tuple(q for q in Quantize if q is not Quantize.INT8),
    targets_trained_as_copies=("embed_tokens",),
    # alloc_conf left at torch's defaults, though today's release sets one: unsloth@015bdef imports unsloth_zoo before
    # torch (unsloth/_gpu_init.py), and unsloth-zoo@ce232d6c unsloth_zoo/__init__.py l. 276-291 sets
    # expandable_segments:True (PYTORCH_ALLOC_CONF under torch >= 2.10; before, PYTORCH_CUDA_ALLOC_CONF with
    # roundup_power2_divisions [32:256,64:128,256:64,>:32], as unsloth/__init__.py did from 2024). Applied, the
    # replay's expandable segment lowers reserved by 0.05-0.45 GiB on the seven measured rows of 2025 releases
    # (UNSLOTH_NB_2509, UNSLOTH_VLM_NB), away from five of them (-2.1 -> -2.7 %, -4.8 -> -6.6 %, -10.8 -> -12.6 %):
    # what else holds reserved there is not identified, so it is not applied yet (2026-12-06)
    version="unsloth@015bdef",
    older_versions=(UNSLOTH_2024_12, UNSLOTH_2024_11, UNSLOTH_2024_8, UNSLOTH_2024_5),
)


def rope_cache_rows(spec: ModelSpec, sc: Scenario, full_context: bool = False) -> int:
    """Positions each layer's cos/sin cache holds once a ``seq_len`` batch has run.

    unsloth@0e0d8fc models/llama.py LlamaExtendedRotaryEmbedding (Llama 3.x; LlamaRotaryEmbedding alike): built
    at ``min(4 * 8192, max_position_embeddings)`` rows; ``extend_rope_embedding`` regrows it to the sequence length
    rounded up to 8192 and never shrinks it. ``full_context`` (``FrameworkProfile.rope_cache_full_context``, 2024.5
    to mid-2024.7): ``max(seq_len, max_position_embeddings)`` rows, fixed (the run's max_seq_length taken as its
    sequence length)."""
    if full_context:
        return max(sc.seq_len, spec.max_position_embeddings or 0)
    initial = UNSLOTH_ROPE_INITIAL_ROWS.value
    if spec.max_position_embeddings:
        initial = min(initial, spec.max_position_embeddings)
    growth = UNSLOTH_ROPE_GROWTH.value
    return max(initial, -(-sc.seq_len // growth) * growth)


def rope_cache_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The per-layer RoPE caches on the GPU: layers x (cos, sin) x rows x head_dim in the compute dtype.

    Each layer's attention builds its own module (unsloth@0e0d8fc models/_utils.py patch_llama_rope_scaling rewrites
    LlamaAttention.__init__ to ``self.rotary_emb = LlamaExtendedRotaryEmbedding(...)``); the first cache is made
    in the default dtype that from_pretrained(torch_dtype=...) sets while the model is built, a regrown one in
    ``x.dtype`` (``_set_cos_sin_cache(..., dtype = x.dtype)``): the compute dtype either way."""
    if not profile.rope_cache_per_layer or spec.position_encoding is not PositionEncoding.ROPE:
        return 0
    per_layer = 2 * rope_cache_rows(spec, sc, profile.rope_cache_full_context) * spec.head_dim * sc.precision.compute_bytes
    return spec.num_hidden_layers * per_layer


class _Events:
    """A :func:`vramfit.estimate.allocator.transient_reserved` event list built with named handles."""

    def __init__(self) -> None:
        self.ev: list[int] = []
        self.n = 0

    def a(self, nbytes: int) -> int:
        self.ev.append(max(0, int(nbytes)))
        self.n += 1
        return self.n

    def f(self, *handles: int) -> None:
        self.ev.extend(-h for h in handles)


def _dims(spec: ModelSpec, sc: Scenario) -> dict[str, int]:
    from vramfit.estimate.activations import mlp_width

    T, c, h = sc.micro_batch_size * sc.seq_len, sc.precision.compute_bytes, spec.hidden_size
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    width = mlp_width(spec)
    w = c if sc.method is Method.QLORA else 0  # fast_dequantize returns a 16-bit weight as it is
    return dict(T=T, c=c, H=c * T * h, Q=c * T * q, KV=c * T * kv, I=c * T * width, XA=c * T * sc.lora_rank,
                lse=4 * T * spec.num_attention_heads, rstd=4 * T, Wq=w * h * q, Wkv=w * h * kv, Wmlp=w * h * width)


def replays_step(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether :func:`step_events` describes this scenario's step: a release whose allocation order is modelled
    (``profile.step_allocation_order``), LoRA through the fused autograd functions on a dense gated-MLP RoPE
    decoder, flash attention (not the xformers fallback of a card without it), offloaded checkpointing."""
    from vramfit.estimate.attention import falls_back_repeating_kv, runs_eager_attention
    from vramfit.scenario import Checkpointing

    return (
        profile.step_allocation_order and sc.method is not Method.FULL and spec.gated_mlp and not spec.num_experts
        and spec.position_encoding is PositionEncoding.ROPE and sc.gradient_checkpointing is Checkpointing.OFFLOAD
        and not runs_eager_attention(spec, sc, profile) and not falls_back_repeating_kv(sc, profile, spec=spec)
    )


def _lora_matmul(e: _Events, d: dict[str, int], out: int, weight: int) -> int:
    """unsloth@0e0d8fc kernels/utils.py matmul_lora: fast_dequantize's 16-bit weight, the output, the weight freed,
    then ``out += (X @ A) @ (s * B)``: the (T, r) product and an output-sized temporary."""
    w = e.a(weight)
    o = e.a(out)
    e.f(w)
    xa = e.a(d["XA"])
    tmp = e.a(out)
    e.f(tmp, xa)
    return o


def _layer_forward(e: _Events, d: dict[str, int], rope_rows: int, head_dim: int) -> dict[str, int]:
    """One LlamaDecoderLayer_fast_forward (unsloth@0e0d8fc models/llama.py) in allocation order; returns the
    tensors still alive at its end that autograd keeps (all of them freed again under no_grad by the caller).
    ``rope_rows``: the layer's RoPE cache regrown on this call (LlamaExtendedRotaryEmbedding._set_cos_sin_cache:
    fp32 arange, outer, cat and cos/sin, then the compute-dtype copy); 0 when it already fits."""
    t: dict[str, int] = {"y1": e.a(d["H"]), "r1": e.a(d["rstd"])}  # Fast_RMS_Layernorm: Y and fp32 r
    t["q"] = _lora_matmul(e, d, d["Q"], d["Wq"])  # LoRA_QKV.forward
    t["k"] = _lora_matmul(e, d, d["KV"], d["Wkv"])
    t["v"] = _lora_matmul(e, d, d["KV"], d["Wkv"])
    if rope_rows:
        for name in ("cos", "sin"):
            ar = e.a(4 * rope_rows)
            freqs = e.a(4 * rope_rows * head_dim // 2)
            e.f(ar)
            emb = e.a(4 * rope_rows * head_dim)
            e.f(freqs)
            fp32 = e.a(4 * rope_rows * head_dim)
            t[name] = e.a(d["c"] * rope_rows * head_dim)
            e.f(fp32, emb)
    t["attn"], t["lse"] = e.a(d["Q"]), e.a(d["lse"])  # flash_attn_func: out and the fp32 softmax_lse
    o = _lora_matmul(e, d, d["H"], d["Wq"])  # LoRA_W (o_proj)
    t["h1"] = e.a(d["H"])  # residual + attention output
    e.f(o)
    t["y2"], t["r2"] = e.a(d["H"]), e.a(d["rstd"])
    t["e"] = _lora_matmul(e, d, d["I"], d["Wmlp"])  # LoRA_MLP.forward: gate, up, swiglu, down
    t["g"] = _lora_matmul(e, d, d["I"], d["Wmlp"])
    swiglu = e.a(d["I"])
    mlp_out = _lora_matmul(e, d, d["H"], d["Wmlp"])
    e.f(swiglu)
    t["out"] = e.a(d["H"])  # residual + MLP output
    e.f(mlp_out)
    return t


def _layer_backward(e: _Events, d: dict[str, int], t: dict[str, int], gqa: bool,
                    grads: dict[str, list[int]], kept: list[int]) -> int:
    """``torch.autograd.backward(output, dY)`` through one recomputed layer (unsloth@0e0d8fc kernels/fast_lora.py,
    rms_layernorm.py, flash-attn 2 mha_bwd); ``t``: the recompute's tensors. Returns the input's gradient.
    ``grads``: the layer's LoRA gradients (fp32 like their weights) per group, made by AccumulateGrad when
    LoRA_MLP's and LoRA_QKV's backward return, and kept until the optimizer step (their handles go to ``kept``)."""
    dw = _lora_matmul(e, d, d["I"], d["Wmlp"])  # LoRA_MLP.backward: DW = matmul_lora(dY, downW.t(), ...)
    for _ in range(2):  # dX = df @ upW.T into X in place, then the de @ gateW.T and LoRA terms as temporaries
        w = e.a(d["Wmlp"])
        e.f(w)
        tmp = e.a(d["H"])
        e.f(tmp)
    e.f(dw, t["e"], t["g"], t["r2"])
    kept += [e.a(size) for size in grads["mlp"]]
    gh1 = e.a(d["H"])  # autograd sums dY and the norm's dX (written over y2) into h1's gradient
    e.f(t["y2"], t["h1"])
    da = _lora_matmul(e, d, d["H"], d["Wq"])  # LoRA_W.backward: dX = dY @ W.T + the LoRA term
    dqkv = [e.a(d["Q"]), e.a(d["KV"]), e.a(d["KV"])]  # flash-attn dq, dk, dv
    work = [e.a(d["lse"]), e.a(2 * d["Q"])]  # softmax_d and the fp32 dq_accum
    if gqa:
        work += [e.a(d["Q"]), e.a(d["Q"])]  # dk_expanded, dv_expanded (summed into dk, dv)
    e.f(*work, da, t["q"], t["k"], t["v"], t["attn"], t["lse"])
    for weight in (d["Wq"], d["Wkv"], d["Wkv"]):  # LoRA_QKV.backward: dX into X, one product per projection
        w = e.a(weight)
        e.f(w)
        tmp = e.a(d["H"])
        e.f(tmp)
    e.f(*dqkv, t["r1"], t["y1"])
    kept += [e.a(size) for size in grads["attn"]]
    return gh1


def _micro_batch(e: _Events, d: dict[str, int], spec: ModelSpec, regrow: int, caches: list[int],
                 grads: dict[str, list[int]]) -> list[int]:
    """One forward and backward (see :func:`step_events`); ``regrow``: the rows each layer's RoPE cache grows to
    on this pass (0: none), its old cache in ``caches`` freed then. Returns the gradients' handles."""
    emb = prev = e.a(d["H"])
    for _ in range(spec.num_hidden_layers):
        t = _layer_forward(e, d, regrow, spec.head_dim)
        if "cos" in t:
            e.f(*caches[:2])
            del caches[:2]
        e.f(*(v for k, v in t.items() if k not in ("out", "cos", "sin")))
        if prev != emb:
            e.f(prev)
        prev = t["out"]
    final = [e.a(d["H"]), e.a(d["rstd"]), e.a(12 * d["T"])]  # final norm output and rstd; CCE's lse and valids
    dy = e.a(d["H"])  # cce_backward_kernel: de = zeros_like(e) ...
    e.f(e.a(d["c"] * (spec.lm_head_params or spec.embedding_params)))  # ... and dc = zeros_like(lm_head.weight)
    e.f(*final, prev)  # the final norm's backward writes its dX over de
    kept: list[int] = []
    for _ in range(spec.num_hidden_layers):
        x = e.a(d["H"])
        t = _layer_forward(e, d, 0, spec.head_dim)
        grad = _layer_backward(e, d, t, spec.num_key_value_heads < spec.num_attention_heads, grads, kept)
        e.f(dy, t["out"], x)
        dy = grad
    e.f(dy, emb)
    return kept


def step_events(spec: ModelSpec, sc: Scenario, state_per_element: float,
                resident: tuple[tuple[int, int], ...] = ()) -> list[int]:
    """The big allocations of two Unsloth 2024.12 training steps in order, for the caching-allocator replay (what
    the reserved figure is made of: a request no cached block fits opens a new segment, and a large cached block
    split for a smaller request no longer serves its own size). Each step: the forward under the offloaded
    checkpointer's no_grad (every layer's tensors freed but its output; the embedding output kept, see
    UNSLOTH_2024_12), the Cut Cross-Entropy forward and backward (estimate/loss.py _apple_cce), then each layer's
    recompute and backward (unsloth-zoo@bb133c7 Unsloth_Offloaded_Gradient_Checkpointer.backward: the input copied
    back first). The first step's forward regrows every layer's RoPE cache; its optimizer step makes the states
    (``state_per_element`` bytes per trainable element, two tensors per weight) where the allocator then has room,
    and zero_grad(set_to_none=True) frees the gradients: the second step runs in what the first left. ``resident``:
    the parameters as (bytes, count), loaded onto the GPU before the first RoPE caches reach it (under expandable
    segments all share one address range: the caches freed at the regrowth are a hole after them; with the caches
    placed first, as this replay had them until 2026-12-05, the 8B line's intercept read 6.607 GiB, now 6.598)."""
    d = _dims(spec, sc)
    e = _Events()
    ab = 4  # the LoRA weights are fp32 (UNSLOTH_PROFILE.adapters_fp32), and so their gradients
    grads: dict[str, list[int]] = {"attn": [], "mlp": []}
    for lin in spec.block_linears:
        if lin.name in sc.lora_targets and lin.group in grads:
            grads[lin.group] += [ab * sc.lora_rank * lin.in_features, ab * lin.out_features * sc.lora_rank]
    rows = rope_cache_rows(spec, sc)
    initial = min(UNSLOTH_ROPE_INITIAL_ROWS.value, spec.max_position_embeddings or UNSLOTH_ROPE_INITIAL_ROWS.value)
    # built with the model but on the host: the attention __init__ Unsloth patches in passes no config (unsloth@0e0d8fc
    # models/_utils.py l. 892-916 patch_llama_rope_scaling), so LlamaExtendedRotaryEmbedding.__init__ keeps device None
    # (models/llama.py l. 1224-1251: "cuda" only with a config); accelerate's dispatch, after from_pretrained has loaded
    # the 4-bit weights onto the GPU, moves the buffers there (v0.33.0 hooks.py l. 280-282 set_module_tensor_to_device)
    for size, count in resident:
        for _ in range(count):
            e.a(size)
    caches = [e.a(d["c"] * initial * spec.head_dim) for _ in range(2 * spec.num_hidden_layers)]
    kept = _micro_batch(e, d, spec, rows if rows > initial else 0, caches, grads)
    for size in [g for _ in range(spec.num_hidden_layers) for g in grads["mlp"] + grads["attn"]]:
        for _ in range(2):  # e.g. exp_avg and exp_avg_sq (or bitsandbytes' state1, state2)
            e.a(int(size // ab * state_per_element / 2))
    e.f(*kept)
    e.f(*_micro_batch(e, d, spec, 0, caches, grads))
    return e.ev
