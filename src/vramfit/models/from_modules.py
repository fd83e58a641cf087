"""A :class:`ModelSpec` for any decoder transformers ships, read from its real modules.

When the config reader has no builder for a ``model_type``, transformers (``sim`` extra) builds the
model from the ``config.json`` on the ``meta`` device (no memory, no download, never
``trust_remote_code``) and this module reads what it holds: every ``nn.Linear`` of the decoder
layers (leaf names as PEFT matches them, how many layers hold each), 3-D expert banks, norms and
other per-layer parameters, embeddings, a tied or separate ``lm_head``, anything else (vision
tower, projector). ``num_params`` then equals ``sum(p.numel() for p in model.parameters())``.
Family facts that need the modelling code's behaviour (soft-capping, fp32 norms ...) stay at the
Llama defaults. Results are cached per config.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from typing import Any

from vramfit.errors import ModelError
from vramfit.models.spec import Linear, ModelSpec

EXTRA = "sim"
_VISION = ("vision", "visual", "multi_modal_projector", ".connector.")  # parameter names of a VLM's tower  # pip install 'vramfit[sim]': torch and transformers


def spec_from_transformers(config: dict, unsupported: str) -> ModelSpec:
    """The spec of ``config``'s model as transformers builds it; ``unsupported`` starts every error."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise ModelError(
            f"{unsupported}: vramfit reads it only from transformers' own modules; install the "
            f"'{EXTRA}' extra (pip install 'vramfit[{EXTRA}]') for torch and transformers"
        ) from None
    return _cached(json.dumps(config, sort_keys=True, default=str), unsupported)


@lru_cache(maxsize=32)
def _cached(config_json: str, unsupported: str) -> ModelSpec:
    import torch
    from huggingface_hub.errors import (
        StrictDataclassError,  # transformers' config classes validate their fields
    )
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = json.loads(config_json)
    kwargs = {k: v for k, v in config.items() if k not in ("auto_map", "quantization_config")}
    try:
        cfg = AutoConfig.for_model(**kwargs)
        encoder_decoder = bool(getattr(cfg, "is_encoder_decoder", False))  # before WhisperForCausalLM turns it off
        auto = AutoModelForImageTextToText if "vision_config" in config else AutoModelForCausalLM
        with torch.device("meta"):
            # built in bf16 as a 16-bit from_pretrained builds it: a parameter still fp32 is fp32 by construction
            model = auto.from_config(cfg, dtype=torch.bfloat16)  # never trust_remote_code
    except (ValueError, KeyError, TypeError, StrictDataclassError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = why if len(why) <= 200 else why[:200] + "…"  # transformers lists every class it knows: the gist only
        raise ModelError(f"{unsupported} (transformers cannot build it as a causal LM: {why})") from None
    if encoder_decoder:  # Whisper, BART: the causal-LM class builds the decoder alone
        raise ModelError(f"{unsupported} (an encoder-decoder model: vramfit models decoder-only transformers)")
    return _read(model, cfg.get_text_config(), config["model_type"], unsupported)


def _expert_width(linears: tuple, hidden: int) -> int:
    """One expert's intermediate width where the config names none (OLMoE, GraniteMoE, PhiMoE and Jamba call it
    ``intermediate_size``): the input of the expert bank back to the hidden size (its down projection), the last such
    bank, as a fused gate/up bank before it is as wide as the hidden size where 2 x the width equals it (OLMoE)."""
    return next((x.in_features for x in reversed(linears) if x.group == "expert" and x.out_features == hidden), 0)


def _convolution(layers: Any) -> str | None:
    """The first convolution inside the decoder layers (its module path), or None. A state-space mixer (Mamba's
    ``conv1d`` in Jamba, Falcon-H1, Granite-4.0-H) or a gated linear-attention one (Qwen3-Next's ``linear_attn``) holds
    one; the estimator's block model (attention, MLP and expert linears, what autograd saves in them) has none of
    their scan state or activations, so such a model is refused rather than estimated as attention blocks."""
    import torch

    for i, layer in enumerate(layers):
        for path, mod in layer.named_modules():
            if isinstance(mod, torch.nn.modules.conv._ConvNd):
                return f"layers.{i}.{path}"
    return None


def _decoder_layers(model: Any) -> tuple[str, Any]:
    """(name, ModuleList) of the decoder layers: the ModuleList holding the most parameters."""
    import torch

    best, size = None, -1
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and "vision" not in name and "visual" not in name:
            n = sum(p.numel() for p in mod.parameters())
            if n > size:
                best, size = (name, mod), n
    if best is None:
        raise ModelError("no decoder layers found")
    return best


def _group(path: str, out_features: int, experts: int) -> str:
    if "shared_expert" in path:
        return "shared_expert"
    if "expert" in path:
        return "expert"
    if any(a in path for a in ("attn", "attention")):
        return "attn"
    if experts and out_features == experts:
        return "router"
    return "mlp"


def _layer_linears(layers: Any, experts: int) -> tuple[Counter, int]:
    """Counter of Linear signatures -> layers holding them, and the other parameters' total."""
    import torch

    sigs: Counter = Counter()
    other = 0
    for layer in layers:
        seen: set[int] = set()
        for path, mod in layer.named_modules():
            if isinstance(mod, torch.nn.Linear):
                seen.update(id(p) for p in mod.parameters(recurse=False))
                leaf = path.rsplit(".", 1)[-1]
                sigs[(leaf, mod.in_features, mod.out_features, mod.bias is not None,
                      _group(path, mod.out_features, experts), 1)] += 1
        for mod in layer.modules():
            for leaf, p in mod.named_parameters(recurse=False):
                if id(p) in seen:
                    continue
                if p.dim() == 3:  # a bank of experts
                    n_in, n_out = _bank_features(mod, p)
                    sigs[(leaf, n_in, n_out, False, "expert", p.shape[0])] += 1
                elif _is_router(mod, leaf, p, experts):
                    sigs[(_leaf_of(layer, mod), p.shape[1], p.shape[0], False, "router", 1)] += 1
                else:
                    other += p.numel()
    return sigs, other


def _is_router(mod: Any, leaf: str, p: Any, experts: int) -> bool:
    """A router that is no ``nn.Linear``: transformers v5.24.0 builds most as an ``nn.Module`` holding a 2-D
    ``weight`` of ``(num_experts, hidden)`` that ``F.linear`` multiplies (modeling_glm4_moe.py l. 269
    Glm4MoeTopkRouter, modeling_qwen3_moe.py l. 250 Qwen3MoeTopKRouter, modeling_granitemoe.py l. 113
    GraniteMoeTopKRouter ...): one router linear per layer, not a norm."""
    return bool(experts) and leaf == "weight" and p.dim() == 2 and p.shape[0] == experts


def _leaf_of(root: Any, mod: Any) -> str:
    """The attribute name ``mod`` has in ``root`` (``gate``, ``router``), as PEFT ``target_modules`` match it."""
    return next(path.rsplit(".", 1)[-1] for path, m in root.named_modules() if m is mod)


def _bank_features(mod: Any, p: Any) -> tuple[int, int]:
    """(in, out) features of a 3-D expert bank. transformers v5.24.0 integrations/moe.py
    ``use_experts_implementation`` gives the experts classes it decorates ``is_transposed``: False (the default,
    Qwen3-MoE, Qwen3-VL-MoE, Qwen2-MoE ...) stores ``(experts, out, in)`` as ``nn.functional.linear`` takes it,
    True (gpt-oss) ``(experts, in, out)``; an undecorated bank multiplied by ``bmm`` (Llama4TextExperts) is
    ``(experts, in, out)`` too."""
    if getattr(mod, "is_transposed", True):
        return p.shape[1], p.shape[2]
    return p.shape[2], p.shape[1]


def _gated(sigs: Counter, layers: Any) -> bool:
    """A gated MLP: an ``up_proj`` linear, or experts the decorator marks ``has_gate`` (a fused gate/up bank,
    act(gate) * up: transformers v5.24.0 integrations/moe.py ``_default_apply_gate``)."""
    experts = (m for m in layers[0].modules() if getattr(m, "has_gate", False) and hasattr(m, "is_transposed"))
    return any(s[0] == "up_proj" for s in sigs) or next(experts, None) is not None


def _read(model: Any, text: Any, model_type: str, unsupported: str) -> ModelSpec:
    hidden = getattr(text, "hidden_size", None)
    heads = getattr(text, "num_attention_heads", None)
    if not hidden or not heads:
        raise ModelError(f"{unsupported} (not a transformer decoder: no hidden_size / attention heads)")
    layers_name, layers = _decoder_layers(model)
    if (conv := _convolution(layers)) is not None:
        raise ModelError(f"{unsupported} (its decoder layers hold a convolution, {conv}: a state-space or "
                         "linear-attention mixer, which vramfit does not model yet)")
    mixer = next((t for t in getattr(text, "layer_types", None) or () if isinstance(t, str)
                  and any(w in t for w in ("linear", "mamba", "ssm"))), None)
    if mixer is not None:  # MiniMax's lightning attention has no convolution: its config names the layers
        raise ModelError(f"{unsupported} (its layer_types name {mixer!r} layers, a linear-attention or state-space "
                         "mixer, which vramfit does not model yet)")
    L = len(layers)
    experts = int(getattr(text, "num_local_experts", 0) or getattr(text, "num_experts", 0)
                  or getattr(text, "n_routed_experts", 0) or 0)
    sigs, other = _layer_linears(layers, experts)
    # a dense MLP on some layers of an MoE model (Llama 4 interleaving) is not in the walked MoE block
    linears = tuple(Linear(n, i, o, b, "dense_mlp" if experts and g == "mlp" and k < L else g, c,
                           layers=0 if k == L else k)
                    for (n, i, o, b, g, c), k in sigs.items())
    embed = model.get_input_embeddings().weight.numel()
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is model.get_input_embeddings().weight
    head = 0 if tied or out is None else sum(p.numel() for p in out.parameters())
    total = sum(p.numel() for p in model.parameters())
    layer_total = sum(p.numel() for p in layers.parameters())
    norm_per_layer = other // L
    vision = sum(p.numel() for name, p in model.named_parameters() if any(v in name for v in _VISION))
    rest = total - layer_total - embed - head - vision + (other - norm_per_layer * L)
    kv = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    inter = getattr(text, "intermediate_size", None) or 4 * hidden
    return ModelSpec(
        model_type=model_type, hidden_size=hidden, num_hidden_layers=L, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=head_dim, intermediate_size=inter,
        vocab_size=model.get_input_embeddings().weight.shape[0], tie_word_embeddings=tied,
        hidden_act=str(getattr(text, "hidden_act", "silu")), gated_mlp=_gated(sigs, layers),
        block_linears=linears, block_norm_params=norm_per_layer, final_norm_params=rest,
        embedding_params=embed, lm_head_params=head, vision_params=vision,
        num_experts=experts, num_experts_per_tok=int(getattr(text, "num_experts_per_tok", 0) or 0),
        moe_intermediate_size=int(getattr(text, "moe_intermediate_size", 0) or 0) or _expert_width(linears, hidden),
        max_position_embeddings=int(getattr(text, "max_position_embeddings", 0) or 0),
        peft_moe_names=_peft_moe_names(model_type) if experts else (),
        **_moe_layers(layers, experts),
        router_exact_linear=_router_exact_linear(layers, experts),
        router_linear_subclass=_router_linear_subclass(layers, experts),
        **_router_dtypes(layers, experts, hidden, int(getattr(text, "num_experts_per_tok", 0) or 0)),
        qk_norm=_has_qk_norm(layers[0]),
        **_fp32_kept(model, layers_name, layers, experts),
        extra={"read_from": f"transformers modules ({type(model).__name__} on meta)"},
    )


def _tensor_name(path: str, leaf: str, mod: Any, p: Any, experts: int) -> str:
    """The estimate/params.py base_tensors name of a decoder layer's parameter ``leaf`` of module ``path``."""
    import torch

    if isinstance(mod, torch.nn.Linear):
        name = path.rsplit(".", 1)[-1]
        return name if leaf == "weight" else f"{name}.bias"
    if p.dim() == 3:
        return leaf
    return path.rsplit(".", 1)[-1] if _is_router(mod, leaf, p, experts) else "block_norms"


def _fp32_kept(model: Any, layers_name: str, layers: Any, experts: int) -> dict[str, tuple[str, ...]]:
    """``ModelSpec.fp32_kept_strict`` / ``fp32_kept_fp16``: the base tensors holding a parameter a 16-bit
    ``from_pretrained`` keeps fp32. transformers v5.24.0 modeling_utils.py ``PreTrainedModel._get_dtype_plan``
    (l. 3844-3858: ``_keep_in_fp32_modules_strict`` on bf16 and fp16 loads, ``_keep_in_fp32_modules`` on fp16
    only, gathered from the submodels by ``post_init`` l. 1301-1322) names them; core_model_loading.py l. 1919-1925
    matches each name by regex ``search`` and leaves a parameter built in another dtype (the model is built in
    bf16 here) in that dtype. A tensor holding one such parameter is counted whole (a norm among norms)."""
    import torch
    from transformers.core_model_loading import build_glob_alternation

    def matcher(dtype: torch.dtype) -> Any:
        plan = model._get_dtype_plan(dtype)
        return build_glob_alternation(list(plan))[0] if plan else None

    strict, fp16 = matcher(torch.bfloat16), matcher(torch.float16)
    names: dict[str, str] = {}  # parameter name -> base tensor name
    for i, layer in enumerate(layers):
        prefix = f"{layers_name}.{i}"
        for path, mod in layer.named_modules():
            for leaf, p in mod.named_parameters(recurse=False):
                names[f"{prefix}.{path}.{leaf}" if path else f"{prefix}.{leaf}"] = _tensor_name(path, leaf, mod, p, experts)
    embed, out = model.get_input_embeddings().weight, model.get_output_embeddings()
    kept: dict[str, list[str]] = {"fp32_kept_strict": [], "fp32_kept_fp16": []}
    for name, p in model.named_parameters():
        tensor = names.get(name) or ("embed_tokens" if p is embed else "lm_head" if out is not None
                                     and any(p is q for q in out.parameters()) else "vision_tower"
                                     if any(v in name for v in _VISION) else "final_norm")
        if p.dtype == torch.float32 or (strict is not None and strict.search(name)):
            key = "fp32_kept_strict"
        elif fp16 is not None and fp16.search(name):
            key = "fp32_kept_fp16"
        else:
            continue
        if tensor not in kept[key]:
            kept[key].append(tensor)
    kept["fp32_kept_fp16"] = [t for t in kept["fp32_kept_fp16"] if t not in kept["fp32_kept_strict"]]
    return {k: tuple(v) for k, v in kept.items()}


def _router_exact_linear(layers: Any, experts: int) -> bool:
    """The router is a module of type exactly ``nn.Linear`` (afmoe's ``gate``, transformers v5.24.0
    modeling_afmoe.py l. 140), which transformers' bitsandbytes quantizer converts (``ModelSpec.router_exact_linear``)."""
    import torch

    return bool(experts) and any(type(m) is torch.nn.Linear and _group(p, m.out_features, experts) == "router"
                                 for layer in layers for p, m in layer.named_modules())


def _router_linear_subclass(layers: Any, experts: int) -> bool:
    """The router is a subclass of ``nn.Linear``, not ``nn.Linear`` itself (PhimoeTopKRouter: ``ModelSpec.
    router_linear_subclass``)."""
    import torch

    return bool(experts) and any(isinstance(m, torch.nn.Linear) and type(m) is not torch.nn.Linear
                                 and _group(p, m.out_features, experts) == "router"
                                 for layer in layers for p, m in layer.named_modules())


def _router_dtypes(layers: Any, experts: int, hidden: int, top_k: int) -> dict[str, bool]:
    """``router_fp32`` and ``routing_weights_fp32``, read by running the model's own router on a 16-bit ``meta`` input
    (no memory): whether its ``F.linear`` takes an fp32 input (Glm4MoeTopkRouter, transformers v5.24.0
    modeling_glm4_moe.py l. 284: ``F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))``;
    Qwen3MoeTopKRouter multiplies the 16-bit input as it is) and whether the top-k weights it returns (a floating
    output of ``top_k`` columns) are fp32. Nothing where no router module runs on its own (fused or absent)."""
    import torch
    from torch.overrides import TorchFunctionMode

    router = next((m for layer in layers for m in layer.modules()
                   if any(_is_router(m, leaf, p, experts) for leaf, p in m.named_parameters(recurse=False))), None)
    if router is None or not top_k:
        return {}
    seen: list[torch.dtype] = []

    class _Linears(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            if func is torch.nn.functional.linear:
                seen.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    try:
        with _Linears(), torch.no_grad():
            out = router(torch.empty((1, 4, hidden), dtype=torch.bfloat16, device="meta"))
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return {}
    outs = out if isinstance(out, tuple) else (out,)
    weights = [t for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point() and t.shape[-1] == top_k]
    return {"router_fp32": bool(seen) and seen[0] == torch.float32,
            "routing_weights_fp32": bool(weights) and weights[0].dtype == torch.float32}


def _moe_layers(layers: Any, experts: int) -> dict[str, Any]:
    """``moe_layers`` and ``first_moe_layer`` where MoE and dense layers mix: the layers holding a 3-D expert bank or
    a router (GLM-4-MoE's dense first layers, ``first_k_dense_replace``); nothing where every layer is of one kind."""
    moe = [i for i, layer in enumerate(layers)
           if any(p.dim() == 3 or _is_router(m, leaf, p, experts)
                  for m in layer.modules() for leaf, p in m.named_parameters(recurse=False))]
    if not experts or not moe or len(moe) == len(layers):
        return {}
    return {"moe_layers": tuple(moe), "first_moe_layer": moe[0]}


def _has_qk_norm(layer: Any) -> bool:
    """The attention normalizes q and k (modules named ``q_norm`` and ``k_norm``, as transformers v5.24.0 names
    them in Qwen3 / OLMo 2 / Gemma 3 and in Qwen3-VL's text model, models/qwen3_vl/modeling_qwen3_vl.py
    Qwen3VLTextAttention): the walk then keeps their saved tensors (estimate/attention.py)."""
    leaves = {path.rsplit(".", 1)[-1] for path, _ in layer.named_modules()}
    return {"q_norm", "k_norm"} <= leaves


def _peft_moe_names(model_type: str) -> tuple[str, ...]:
    """The names PEFT moves from ``all-linear`` to this model type's fused experts (see
    ``ModelSpec.peft_moe_names``), read from peft v0.21.2 utils/transformers_weight_conversion.py
    (model types whose conversion pattern has fused MoE targets); () without peft."""
    import logging

    # importing peft imports bitsandbytes, whose CPU backend logs a warning when the optional `kernels` package is
    # absent (bitsandbytes 0.50.2 backends/cpu/ops.py l. 241-255: "Failed to load CPU gemm_4bit_forward"); with no handler
    # configured Python prints it on stderr, under an estimate that runs no 4-bit matmul: a NullHandler on that one
    # logger keeps it off stderr and still lets an application that configures logging see it
    cpu_ops = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if not cpu_ops.handlers:
        cpu_ops.addHandler(logging.NullHandler())
    try:
        from peft.utils import transformers_weight_conversion as conv
    except ImportError:
        return ()
    base = getattr(conv, "_MODEL_TO_CONVERSION_PATTERN", {}).get(model_type)
    if not getattr(conv, "_MOE_FUSED_TARGETS", {}).get(base):
        return ()
    return tuple(getattr(conv, "_MOE_TARGET_MODULE_MAPPING", {}).get(base, {}))
