"""The architecture of a decoder-only model, as the estimator needs it.

A :class:`ModelSpec` is derived from a Hugging Face ``config.json`` (field names as there) and
lists every parameter-holding module of one decoder block, so that parameter counts, LoRA adapters,
quantized storage and activations are all computed from the same description.

No torch here: loading a spec is instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class NormType(str, Enum):
    """The norm module of a decoder block."""

    RMSNORM = "rmsnorm"
    LAYERNORM = "layernorm"  # with bias; native_layer_norm saves its input and fp32 mean/rstd


class PositionEncoding(str, Enum):
    """How positions enter attention: rotary makes q and k new tensors; ALiBi and learned absolute
    positions leave them views of the projection output."""

    ROPE = "rope"
    ALIBI = "alibi"  # BLOOM (Press et al. 2022)
    LEARNED = "learned"  # GPT-2 wpe


@dataclass(frozen=True)
class Linear:
    """One ``nn.Linear`` (or a bank of identical ones, e.g. MoE experts) inside a decoder block.

    ``name`` is the Hugging Face leaf module name (``q_proj``, ``gate_proj``, ``query_key_value``,
    ``dense_4h_to_h``, ``c_attn`` ...), which is what PEFT ``target_modules`` match.
    ``count`` is the number of identical instances per block (``num_local_experts`` for expert
    linears, 1 otherwise). ``group`` says where it sits: ``attn``, ``mlp``, ``expert``,
    ``shared_expert`` or ``router``.
    """

    name: str
    in_features: int
    out_features: int
    bias: bool
    group: str
    count: int = 1
    # decoder layers holding this linear; 0 = every layer. DeepSeek-V3 has dense MLPs in its first
    # ``first_k_dense_replace`` layers and MoE in the rest; Llama 4 interleaves them
    # (transformers v5.24.0 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3DecoderLayer)
    layers: int = 0

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features * self.count

    @property
    def bias_params(self) -> int:
        return (self.out_features if self.bias else 0) * self.count

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params


@dataclass(frozen=True)
class VisionTower:
    """A vision-language model's vision tower as the estimator walks it: one encoder block
    (``block``, a :class:`ModelSpec` with no embeddings or head, ``num_hidden_layers`` = depth) and
    the config fields its processor's token rule reads (``vramfit.models.vlm_tokens``)."""

    block: ModelSpec
    image_config: dict = field(default_factory=dict, compare=False, hash=False)
    # encoder layers after the one whose output the projector reads (LLaVA vision_feature_layer=-2: the
    # last layer) and their parameters (with the post-norm): they run, but get no gradient
    unused_layers: int = 0
    unused_params: int = 0
    # the projector's nn.Linear modules in order, an activation between consecutive ones (LLaVA
    # linear_1 -> GELU -> linear_2; Qwen2.5-VL merger mlp.0 -> GELU -> mlp.2); each reads one row per
    # image token of the language model
    projector: tuple[Linear, ...] = ()
    # each block scales its attention and MLP branches by learned vectors (InternViT lambda_1/lambda_2)
    layer_scale: bool = False
    # decoder layers that read the image through cross-attention instead of placeholder tokens (Llama 3.2
    # Vision ``cross_attention_layers``; estimate/cross_attention.py); 0: the image is in the sequence
    cross_attention_layers: int = 0
    # the tower's layers run under gradient checkpointing when the model's is on (False: plain nn.Module
    # layers, Mllama's MllamaVisionEncoderLayer in transformers v5.24.0 models/mllama/modeling_mllama.py)
    checkpointed: bool = True
    # transformers 4's modelling code checkpoints the tower's layers although v5.24.0 does not (transformers v4.46.2
    # models/mllama/modeling_mllama.py MllamaVisionEncoder.forward l. 381-386: `if self.gradient_checkpointing and
    # self.training: self._gradient_checkpointing_func(encoder_layer.__call__, ...)`); read under a profile whose
    # ``vision_v4_checkpointing`` is set (estimate/vision.py tower_checkpointed)
    checkpointed_v4: bool = False
    # encoder layers that scale their attention and MLP outputs by a learned tanh gate (Mllama's global
    # layers: ``gate_attn.tanh() * hidden_states``), which saves each branch's output for the gate's gradient
    gated_layers: int = 0
    # the tower's attention takes a float (images, 1, P, P) mask over each image's P patches (Mllama's
    # aspect-ratio mask, modeling_mllama.py _prepare_aspect_ratio_attention_mask), saved by every layer's kernel
    attention_mask: bool = False
    # the model's output object holds the tower's output (the projector's input) until the loss is taken
    # (MllamaModel.forward returns ``image_outputs=vision_outputs``); a trainer drops it before backward
    output_held: bool = False
    # a norm between encoder stacks keeps the lower stack's output beside the upper stack's input (Mllama:
    # the local encoder's output through ``layernorm_post`` and the post-tile embedding before the global one)
    stacks: int = 1
    # SDPA runs once per attention segment (image, frame or window) and ``torch.cat`` joins the outputs: a
    # new tensor beside the kernels' saved outputs, which the output projection saves when its weight trains
    # (transformers v5.24.0 models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLVisionAttention.forward)
    segmented_attention: bool = False
    # the projector starts with an RMSNorm over every patch (Qwen2_5_VLPatchMerger.ln_q): fp32 copy of its
    # input and the rsqrt saved, the normed 16-bit tensor too when its weight trains
    projector_rmsnorm: bool = False
    # the tower ends in a LayerNorm (Idefics3 / SmolVLM ``post_layernorm``) that saves the last block's output
    # when it trains; its output, held by the model's output object (``image_outputs.last_hidden_state``),
    # is copied by the connector's pixel shuffle (a reshape of a permuted view), and the projector's output by
    # the image features' list (``pooler_output``) until the loss is taken (transformers v5.24.0
    # models/idefics3/modeling_idefics3.py Idefics3Model.get_image_features, Idefics3Connector.pixel_shuffle)
    post_norm_held: bool = False
    # the model copies the pixel values (Idefics3 / SmolVLM drop padding images: ``pixel_values[real_images_inds]
    # .contiguous()``), the copy saved by the patch embedding when its weight trains; the batch carries a
    # ``pixel_attention_mask`` of one byte per pixel and channel-less
    pixels_copied: bool = False
    # DeepStack (Qwen3-VL): this many more mergers, each the projector's linears behind a LayerNorm over the
    # merged width, read the outputs of as many tower blocks; their features are added to the outputs of the
    # first as many decoder layers at the image positions (transformers v5.24.0
    # models/qwen3_vl/modeling_qwen3_vl.py Qwen3VLVisionModel.deepstack_merger_list,
    # Qwen3VLTextModel._deepstack_process)
    deepstack_mergers: int = 0
    # the projector starts with a LayerNorm over every patch (Qwen2-VL PatchMerger.ln_q, transformers v5.24.0
    # models/qwen2_vl/modeling_qwen2_vl.py): native_layer_norm saves its input and the per-patch mean and rstd
    projector_layernorm: bool = False
    # the processor returns ``token_type_ids`` marking the image tokens and the model lets each image's tokens
    # attend to one another: every layer's attention gets a mask (Gemma 3: transformers v5.24.0
    # models/gemma3/processing_gemma3.py l. 34, 70-71 ``return_mm_token_type_ids = True``, renamed token_type_ids;
    # modeling_gemma3.py l. 671-737 create_masks_for_vision_model, l. 876-880; estimate/attention.py masked_layers)
    bidirectional_image_mask: bool = False
    # the tower's PreTrainedModel returns its patch embedding from get_input_embeddings, so enable_input_require_grads
    # hooks it (transformers v5.24.0 modeling_utils.py l. 969-1000: ``_input_embed_layer``, then ``embeddings.<name>``;
    # SigLIP/CLIP ``embeddings.patch_embedding``, Qwen2.5-VL ``_input_embed_layer = "patch_embed"``); Qwen3VLVisionModel
    # names none, so nothing hookable comes back and the hook is skipped (l. 2169-2170; estimate/vision.py
    # frozen_tower_recorded)
    patch_embedding_exposed: bool = True

    @property
    def cross_attention(self) -> bool:
        return self.cross_attention_layers > 0

    @property
    def mergers(self) -> int:
        """Copies of the projector that run: the merger and the DeepStack mergers."""
        return 1 + self.deepstack_mergers


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer, enough to count every parameter exactly.

    Field names follow Hugging Face ``config.json``. ``block_linears`` describes one decoder block
    (all blocks are identical in every catalog family; Gemma 2/3 alternate sliding-window and global
    attention, which changes no parameter, only ``sliding_window`` / ``layer_types``).
    """

    model_type: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    hidden_act: str
    gated_mlp: bool  # SwiGLU / GeGLU (gate and up projections)
    block_linears: tuple[Linear, ...]
    block_norm_params: int  # all norm weights (and biases) in one block, incl. q/k norms
    final_norm_params: int
    embedding_params: int  # token embeddings (+ learned positional embeddings if any)
    lm_head_params: int  # 0 when tied to the embeddings (then counted once, in embedding_params)
    norm_type: NormType = NormType.RMSNORM
    parallel_attn_mlp: bool = False  # Falcon / Phi-1.5 / Phi-2 / GPT-NeoX style parallel residual
    num_experts: int = 0  # 0 = dense
    num_experts_per_tok: int = 0
    # every expert runs every token, scaled by its router score (zero where not routed): transformers
    # v5.24.0 models/llama4/modeling_llama4.py Llama4TextMoe.forward repeats the tokens num_experts times
    # and Llama4TextExperts runs one bmm over the (experts, tokens, hidden) block
    experts_run_every_token: bool = False
    # index of the lowest MoE layer where dense layers sit below it (DeepSeek-V2/V3 ``first_k_dense_replace``,
    # Llama 4 ``interleave_moe_layer_step`` - 1 or the smallest of ``moe_layers``); 0 otherwise
    first_moe_layer: int = 0
    # the MoE layers' indices where a model mixes MoE and dense layers (DeepSeek-V2/V3 ``layer_idx >=
    # first_k_dense_replace``; Llama 4 ``moe_layers``, by default every ``interleave_moe_layer_step``-th; Qwen3-MoE
    # ``mlp_only_layers`` / ``decoder_sparse_step``); () when every layer is of one kind (see is_moe_layer)
    moe_layers: tuple[int, ...] = ()
    moe_intermediate_size: int = 0
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()  # e.g. ("sliding_attention", "full_attention", ...)
    # transformers 4's modelling code (before masking_utils: profile ``masks_per_layer_type`` off) always builds one
    # 4-D float mask for the model, whatever the sequence against the window, and each sliding layer makes its own
    # masked copy, which it hands SDPA (Gemma 3, transformers v4.52.4 models/gemma3/modeling_gemma3.py
    # Gemma3TextModel._update_causal_mask l. 685-720 and Gemma3Model._update_causal_mask l. 1015-1093: no SDPA skip;
    # Gemma3DecoderLayer.forward l. 426-450: ``torch.where(sliding_window_mask, min_dtype, attention_mask)`` then
    # ``attention_mask[:, :, :, mask_indexes]``; estimate/forward_extras.py sliding_window_masks)
    sliding_mask_copies_v4: bool = False
    partial_rotary_factor: float = 1.0
    # the family's apply_rotary_pos_emb ends in ``torch.cat([q_embed, q_pass], dim=-1)`` whatever the rotary fraction
    # (transformers v5.24.0 models/phi3/modeling_phi3.py l. 184, models/gpt_neox/modeling_gpt_neox.py l. 138): q reaches
    # SDPA [B, H, S, D]-contiguous, the flash kernel writes its output in q's layout (torch v2.13.0
    # _meta_registrations.py meta__scaled_dot_product_flash_attention ``torch.empty_like(query)``), so the
    # ``transpose(1, 2)`` and ``.contiguous()`` before o_proj copy it (estimate/activations.py)
    rope_concat: bool = False
    max_position_embeddings: int = 0
    # --- family facts the estimator reads (filled by the config reader; never a model_type test) ---
    # the last transformers 4.x minor release whose modelling of this family gives every attention layer its own
    # RoPE cos/sin cache of max_position_embeddings rows (0: none; sources in estimate/rope_v4.py)
    rope_cache_v4_last: int = 0
    # norms feeding the parallel attention and MLP branches: 1 = one shared norm (Phi, Falcon-7B
    # modeling_falcon.py num_ln_in_parallel_attn=1), 2 = one each (GPT-NeoX, Falcon new arch)
    parallel_norms: int = 2
    # Gemma RMSNorm: ``output * (1.0 + self.weight.float())`` in fp32, so the normed output kept
    # for the weight gradient is fp32 (transformers v5.24.0 models/gemma/modeling_gemma.py GemmaRMSNorm)
    norm_one_plus_weight: bool = False
    # RMSNorm on q and k per head before rotary (Qwen 3, OLMo 2, Gemma 3 q_norm / k_norm)
    qk_norm: bool = False
    # layers whose attention L2-normalizes q and k without a weight: ``Llama4TextL2Norm`` (transformers v5.24.0
    # models/llama4/modeling_llama4.py, ``use_qk_norm`` on the RoPE layers only); each keeps fp32 q and k copies
    qk_l2_norm_layers: int = 0
    # post-attention and post-feedforward norms on the branch outputs too (Gemma 2 / 3)
    sandwich_norms: bool = False
    position_encoding: PositionEncoding = PositionEncoding.ROPE
    # LayerNorm right after the token embeddings (BLOOM word_embeddings_layernorm)
    embedding_norm: bool = False
    # the family's transformers modelling has an SDPA path (BLOOM: eager only, for ALiBi)
    sdpa_supported: bool = True
    # the family's transformers modelling has a flash-attention path (``_supports_flash_attn``; transformers
    # v5.24.0 modeling_utils.py PreTrainedModel defaults it to False: BLOOM has none, gpt-oss sets True)
    flash_supported: bool = True
    # eager softmax upcasts the scores to fp32 (``softmax(..., dtype=torch.float32)`` in Llama-style
    # eager_attention_forward); False for GPT-2 style softmax in the compute dtype
    eager_softmax_fp32: bool = True
    # the compute-dtype eager softmax takes no dtype argument (``nn.functional.softmax(attn_weights, dim=-1)``:
    # transformers v5.24.0 models/internvl/modeling_internvl.py eager_attention_forward l. 92-93), so under autocast it
    # runs in fp32 all the same: torch v2.13.0 aten/src/ATen/autocast_mode.cpp registers softmax with
    # CastPolicy::fp32_set_opt_dtype (an op given no output dtype gets float32); with dtype=... given (gpt-oss's
    # sink softmax) it keeps that dtype. attention.softmax_fp32 reads it with the block's autocast
    eager_softmax_autocast: bool = False
    # 16-bit (B, H, S, S) score tensors the eager forward still binds while softmax makes its fp32 copy and output:
    # 1 where ``attn_weights`` is rebound at each step (transformers v5.24.0 eager_attention_forward, Gemma 2's
    # softcap steps included: each old tensor is unbound once the next exists); 2 in BLOOM, whose
    # ``attention_scores = alibi.baddbmm(...)`` stays bound beside ``attn_weights + attention_mask``
    # (v5.24.0 models/bloom/modeling_bloom.py BloomAttention.forward; read from v5.24.0 only: BLOOM in transformers 4
    # binds ``matmul_result`` and masks with ``masked_fill`` (fp16 scores cast to fp32 first), not derived here)
    eager_forward_scores: int = 1
    # the block returns its attention probabilities whatever ``output_attentions`` says and the model's loop keeps
    # the last block's outputs bound (``outputs = block(...)``) while the next block runs: BLOOM (v5.24.0
    # BloomBlock.forward ``return output, attn_weights``, BloomModel.forward's layer loop)
    block_returns_attention_probs: bool = False
    attn_logit_softcapping: float | None = None  # Gemma 2: tanh soft-capping of attention scores
    final_logit_softcapping: float | None = None  # Gemma 2: tanh soft-capping of the logits
    fused_qkv: str = ""  # name of the fused q/k/v projection ("query_key_value", "qkv_proj", "c_attn")
    fused_gate_up: str = ""  # name of the fused gate/up projection (Phi-3 "gate_up_proj")
    # tensors the MLP activation saves in transformers' implementation: 4 for the python-composed
    # tanh GELU (transformers v5.24.0 activations.py NewGELUActivation / FastGELUActivation), else 1
    act_saved_tensors: int = 1
    # k/v heads reach SDPA as a stride-0 ``expand`` view that flash and memory-efficient kernels
    # reject (transformers v5.24.0 models/falcon/modeling_falcon.py
    # FalconAttention._split_heads: torch.broadcast_to(key, query.shape))
    kv_broadcast_view: bool = False
    # block linears are a subclass of nn.Linear (FalconLinear), which transformers' bitsandbytes
    # quantizer leaves unquantized
    linear_subclass: bool = False
    attention_dropout: float = 0.0  # dropout on the attention probabilities (attention_dropout / attn_pdrop)
    hidden_dropout: float = 0.0  # residual dropout after the attention and MLP outputs (resid_pdrop / hidden_dropout)
    # --- multi-head latent attention (DeepSeek-V2/V3, transformers v5.24.0
    # models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3Attention): q and kv pass low-rank
    # projections (q_a_proj -> q_a_layernorm -> q_b_proj; kv_a_proj_with_mqa -> kv_a_layernorm ->
    # kv_b_proj); head_dim is then the q/k head width (qk_nope + qk_rope), v_head_dim the v width
    q_lora_rank: int = 0  # 0 = plain q_proj
    kv_lora_rank: int = 0  # 0 = no latent attention
    v_head_dim: int = 0  # 0 = head_dim
    qk_rope_head_dim: int = 0  # the rotary part of head_dim (the rest, qk_nope, comes from kv_b_proj)
    # a learned per-head sink logit joins the softmax (gpt-oss, transformers v5.24.0
    # models/gpt_oss/modeling_gpt_oss.py eager_attention_forward: cat([scores, sinks]) then softmax)
    attention_sinks: bool = False
    # the checkpoint stores the expert banks as MXFP4 blocks (uint8, two 4-bit values a byte) and scales (one
    # uint8 per 32 values): config.json quantization_config quant_method "mxfp4" (openai/gpt-oss-*)
    experts_mxfp4: bool = False
    # transformers 4 keeps the experts as 3-D banks and its training forward loops over the experts hit, indexing
    # each bank with a one-element index tensor (transformers v4.55.0 models/gpt_oss/modeling_gpt_oss.py
    # GptOssExperts.forward, ``if self.training`` branch: ``self.gate_up_proj[expert_idx]``, ``self.down_proj[expert_idx]``,
    # expert_idx from ``nonzero()``): advanced indexing copies the expert's weights (estimate/moe_kernel.py)
    experts_v4_indexed_loop: bool = False
    # the transformers-v4 module names PEFT moves from ``all-linear`` to ``target_parameters`` for this
    # family: peft v0.21.2 utils/transformers_weight_conversion.py _convert_peft_config_moe, for the model
    # types whose conversion pattern is mixtral (gate, w1, w3, w2) or qwen2_moe (gate, gate_proj, up_proj,
    # down_proj). The fused 3-D experts then get ParamWrappers (gate_up_proj at rank 2r, down_proj) and
    # the router weight one; modules still bearing those names (shared experts, dense MLPs) keep no
    # adapter. Empty: all-linear leaves fused experts and non-Linear routers alone (gpt-oss, Llama 4).
    peft_moe_names: tuple[str, ...] = ()
    # the router runs in fp32 on an fp32 copy of its input, kept when its weight needs a gradient
    # (transformers v5.24.0 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3TopkRouter.forward:
    # F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)))
    router_fp32: bool = False
    # the router returns its top-k routing weights in fp32 whatever the model's dtype (sigmoid or softmax scores of an
    # fp32 router: transformers v5.24.0 models/glm4_moe/modeling_glm4_moe.py l. 284-300 Glm4MoeTopkRouter.forward), and
    # the grouped experts path multiplies them into the 16-bit expert output (integrations/moe.py l. 523
    # ``weighted_out = proj_out * sample_weights_g.unsqueeze(-1)``): type promotion makes the (tokens x top_k, hidden)
    # product, its un-permuted copy and their gradients fp32 (estimate/block_extras.py unpermute_backward)
    routing_weights_fp32: bool = False
    # the router is a module of type exactly nn.Linear, which transformers' bitsandbytes quantizer converts
    # (estimate/core.py _is_quantized_linear). False for every router the readers build: transformers v5.24.0 makes it
    # an nn.Module holding a 2-D weight (modeling_mixtral.py l. 96 MixtralTopKRouter, modeling_qwen3_moe.py l. 250
    # Qwen3MoeTopKRouter, modeling_deepseek_v3.py l. 120 DeepseekV3TopkRouter, modeling_gpt_oss.py l. 117
    # GptOssTopKRouter) or a subclass of nn.Linear (modeling_llama4.py l. 141 Llama4Router); from_modules reads it
    router_exact_linear: bool = False
    # the router subclasses nn.Linear but its forward returns a tuple (transformers v5.24.0 modeling_llama4.py l. 141
    # Llama4Router, modeling_phimoe.py l. 463 PhimoeTopKRouter): PEFT's all-linear wraps it, and peft 0.21.2's LoRA
    # Linear.forward then reads ``result.dtype`` on the tuple (tuners/lora/layer.py), so the run fails (the simulator
    # runs both libraries and fails the same way); the estimate says so (estimate/__init__.py _router_note)
    router_linear_subclass: bool = False
    # parameters transformers keeps in fp32 when the checkpoint is loaded in 16 bits, named as
    # estimate/params.py base_tensors names them: ``_keep_in_fp32_modules_strict`` (bf16 and fp16 loads) and
    # ``_keep_in_fp32_modules`` (fp16 loads only), applied by from_pretrained's dtype plan (transformers
    # v5.24.0 modeling_utils.py PreTrainedModel._get_dtype_plan). Buffers (DeepSeek's e_score_correction_bias)
    # are left out: FSDP shards parameters only. estimate/fsdp_dtype.py refuses the FSDP units they break.
    fp32_kept_strict: tuple[str, ...] = ()
    fp32_kept_fp16: tuple[str, ...] = ()
    # vision tower + multimodal projector parameters of a vision-language checkpoint (counted in
    # num_params; their weights are held, their activations are not walked)
    vision_params: int = 0
    # the vision tower's block and image-token rule (hf_vlm.py), where the reader knows them; None: the
    # tower's weights are held, its activations not modelled
    vision: VisionTower | None = field(default=None, compare=False, hash=False)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "norm_type", NormType(self.norm_type))
        object.__setattr__(self, "position_encoding", PositionEncoding(self.position_encoding))

    @property
    def v_dim(self) -> int:
        """Width of one value head (MLA: v_head_dim; else head_dim)."""
        return self.v_head_dim or self.head_dim

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer ``i`` holds the router and experts (``moe_layers``; else every layer of an MoE model)."""
        return i in self.moe_layers if self.moe_layers else self.num_experts > 0

    def layers_of(self, lin: Linear) -> int:
        """How many decoder layers hold ``lin``."""
        return lin.layers or self.num_hidden_layers

    @property
    def block_params(self) -> int:
        """Parameters in one decoder block (linears incl. biases, plus norms); with mixed dense and
        MoE layers, the linears of every layer kind."""
        return sum(lin.params for lin in self.block_linears) + self.block_norm_params

    @property
    def num_params(self) -> int:
        """All parameters, tied embeddings counted once (what safetensors metadata reports)."""
        return (
            self.embedding_params
            + sum(lin.params * self.layers_of(lin) for lin in self.block_linears)
            + self.num_hidden_layers * self.block_norm_params
            + self.final_norm_params
            + self.lm_head_params
            + self.vision_params
        )

    @property
    def expert_rows_per_token(self) -> int:
        """Rows each token adds to the expert path's tensors (MoE only)."""
        return self.num_experts if self.experts_run_every_token else self.num_experts_per_tok

    @property
    def active_params_per_token(self) -> int:
        """Parameters a token passes through (MoE: only ``num_experts_per_tok`` experts)."""
        if not self.num_experts:
            return self.num_params
        expert = sum(lin.params * self.layers_of(lin) for lin in self.block_linears if lin.group == "expert")
        active_expert = expert * self.num_experts_per_tok // self.num_experts
        return self.num_params - (expert - active_expert)
