"""transformers 4's per-layer RoPE caches: every attention layer of a Llama, Mistral or Qwen2 model built its own
rotary module holding cos and sin tables of ``max_position_embeddings`` rows, buffers that follow the model to the GPU.

transformers v4.35.2 models/llama/modeling_llama.py l. 125-136 (``_set_cos_sin_cache(seq_len=max_position_embeddings,
..., dtype=torch.get_default_dtype())``: ``cos_cached``, ``sin_cached``), v4.39.3 / v4.40.2 l. 105-113 (kept "for BC" as
``_cos_cached``, ``_sin_cached`` while the forward computes its own; gone in v4.41.2), LlamaAttention l. 295 building
``self.rotary_emb`` per layer; mistral v4.39.3 l. 105-116 and l. 232, v4.41.2 l. 104-115 (gone in v4.42.4); qwen2 v4.44.2
l. 150-161 and l. 276 (gone in v4.45.2, whose rotary module computes cos/sin in its forward). The default dtype is the
``torch_dtype`` from_pretrained was given while the model is built (v4.39.3 modeling_utils.py l. 3367
``_set_default_torch_dtype``, restored l. 3523): the stored weights' dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.models.spec import PositionEncoding

if TYPE_CHECKING:
    from vramfit.estimate.profile_fields import FrameworkProfile
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario

#: transformers-4.40: the v4.33-v4.40 releases (the transformers-4.44 band) with the Llama, Mistral and Qwen2 caches
ROPE_V4_SOURCE = (
    "transformers v4.33-v4.40 as transformers-4.44 (logits.float() in the model, foreach AdamW, one mask per model, "
    "k and v repeated for SDPA), and every Llama, Mistral and Qwen2 attention layer holds RoPE cos/sin buffers of "
    "max_position_embeddings rows in the load dtype (v4.39.3 models/llama/modeling_llama.py l. 105-113, "
    "models/mistral/modeling_mistral.py l. 105-116; estimate/rope_v4.py)"
)
ROPE_V4_40 = ("rope_cache_v4_release", 40)
#: the newest release of the transformers-4.44 band (v4.41-v4.45: logits.float() in the model until v4.46.0) and of the
#: transformers-4.47 band (v4.46-v4.48), the release a band is modelled at: of the catalog's families only Mixtral still
#: holds the caches at v4.45 (ModelSpec.rope_cache_v4_last 47), none at v4.48
ROPE_V4_45 = ("rope_cache_v4_release", 45)
ROPE_V4_48 = ("rope_cache_v4_release", 48)


def rope_cache_v4_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The caches on each GPU: layers x (cos, sin) x max_position_embeddings x rotary width in the load dtype, whole
    under every sharding (buffers are neither sharded nor partitioned). Regrowth past max_position_embeddings (the
    older forward's ``seq_len > max_seq_len_cached``) is not counted."""
    release = profile.rope_cache_v4_release
    if not release or release > spec.rope_cache_v4_last or spec.position_encoding is not PositionEncoding.ROPE:
        return 0
    width = int(spec.head_dim * spec.partial_rotary_factor)
    elem = 4 if sc.method in profile.rope_cache_v4_fp32_methods else sc.precision.param_bytes  # fp32: no torch_dtype
    return spec.num_hidden_layers * 2 * spec.max_position_embeddings * width * elem
