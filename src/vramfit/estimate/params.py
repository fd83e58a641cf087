"""The parameter tensors of a model and of its LoRA adapters, resolved from the spec and scenario.

Every later count (weights, quantized storage, gradients, optimizer state, allocator rounding) walks
this one inventory, so tied embeddings, fused projections and MoE experts are handled in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

from vramfit.errors import ScenarioError
from vramfit.models.spec import Linear, ModelSpec
from vramfit.scenario import ALL_LINEAR, Method, Scenario

#: The slices a Llama-style target name selects in a fused projection (``spec.fused_qkv`` /
#: ``spec.fused_gate_up`` name the fused linear).
_QKV_NAMES = ("q_proj", "k_proj", "v_proj")
_GATE_UP_NAMES = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class ParamTensor:
    """``count`` identical tensors of ``shape`` (e.g. one per layer, per expert)."""

    name: str
    shape: tuple[int, ...]
    count: int
    kind: str  # embedding | lm_head | linear | expert | bias | norm | vision | lora_A | lora_B | lora_magnitude

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def total(self) -> int:
        return self.numel * self.count


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter on (a slice of) one block linear, or on lm_head / embed_tokens."""

    target: str  # the linear's HF name (the fused one for slices)
    in_features: int
    out_features: int  # of the adapted slice(s)
    per_layer: int  # instances per decoder block (experts); 0 for lm_head/embed_tokens (once per model)
    slices: int = 1  # lit-gpt stacks the A matrices of k enabled q/k/v slices: A is (k*r, in)
    layers: int = 0  # decoder layers holding the adapted linear (0 = every layer; Linear.layers)
    # a PEFT ParamWrapper on a fused 3-D expert parameter (ModelSpec.peft_moe_names): the update
    # is folded into the weight, the slices' ranks stack in both A and B (peft v0.21.2
    # tuners/lora/layer.py ParamWrapper.update_layer: lora_A (in, r*E), lora_B (r*E, out))
    param_wrapper: bool = False
    vision: bool = False  # on a vision-tower block linear (estimate/vision.py); layers = the tower's depth
    # DoRA (estimate/dora.py): a trained magnitude per output, registered after lora_A and lora_B (peft v0.21.2
    # tuners/lora/layer.py LoraLayer.__init__: the lora_magnitude_vector ModuleDict; DoraLinearLayer.weight, out_features)
    dora: bool = False

    def tensors(self, rank: int, layers: int) -> tuple[ParamTensor, ...]:
        count = self.per_layer * (self.layers or layers) if self.per_layer else 1
        b_rank = rank * self.slices if self.param_wrapper else rank
        magnitude = (ParamTensor(f"{self.target}.lora_magnitude_vector", (self.out_features,), count, "lora_magnitude"),)
        return (
            ParamTensor(f"{self.target}.lora_A", (rank * self.slices, self.in_features), count, "lora_A"),
            ParamTensor(f"{self.target}.lora_B", (self.out_features, b_rank), count, "lora_B"),
        ) + (magnitude if self.dora else ())


def base_tensors(spec: ModelSpec) -> list[ParamTensor]:
    """All parameters of the base model as tensors (tied embeddings once)."""
    h = spec.hidden_size
    L = spec.num_hidden_layers
    out = [ParamTensor("embed_tokens", (spec.embedding_params // h, h), 1, "embedding")]
    rest = spec.embedding_params % h
    if rest:
        out.append(ParamTensor("embed_extra", (rest,), 1, "embedding"))
    for lin in spec.block_linears:
        n = lin.count * spec.layers_of(lin)
        # a bank of experts is one 3-D parameter, told apart from an nn.Linear of the same name (DeepSeek's
        # dense and shared-expert down_proj beside the experts' down_proj)
        kind = "expert" if lin.group == "expert" else "router" if lin.group == "router" else "linear"
        out.append(ParamTensor(lin.name, (lin.out_features, lin.in_features), n, kind))
        if lin.bias:
            out.append(ParamTensor(f"{lin.name}.bias", (lin.out_features,), n, "bias"))
    if spec.block_norm_params:
        n = spec.block_norm_params
        if n % h == 0:
            out.append(ParamTensor("block_norms", (h,), (n // h) * L, "norm"))
        else:
            out.append(ParamTensor("block_norms", (n,), L, "norm"))
    if spec.final_norm_params:
        out.append(ParamTensor("final_norm", (spec.final_norm_params,), 1, "norm"))
    if spec.vision_params:
        out.extend(vision_tensors(spec))
    if spec.lm_head_params:
        rows, rest = divmod(spec.lm_head_params, h)
        out.append(ParamTensor("lm_head", (rows, h), 1, "lm_head"))
        if rest:
            out.append(ParamTensor("lm_head.bias", (rest,), 1, "bias"))
    return out


def vision_tensors(spec: ModelSpec) -> list[ParamTensor]:
    """The vision tower and projector: their nn.Linear weights (kind ``vision_linear``, which a
    bitsandbytes base quantizes like the language model's: transformers v5.24.0
    quantizers/base.py get_keys_to_not_convert spares only the output layer and tied weights) and
    the rest in one tensor (``vision``); the layers past the projector's feature layer apart
    (``vision_unused*``: they never get a gradient). Without a walked tower: one ``vision`` tensor."""
    tower = spec.vision
    if tower is None:
        return [ParamTensor("vision_tower", (spec.vision_params,), 1, "vision")]
    block, unused = tower.block, tower.unused_layers
    out, linear = [], 0
    for lin in block.block_linears:
        shape = (lin.out_features, lin.in_features)
        out.append(ParamTensor(f"vision.{lin.name}", shape, block.num_hidden_layers - unused, "vision_linear"))
        if unused:
            out.append(ParamTensor(f"vision.{lin.name}.unused", shape, unused, "vision_unused_linear"))
        linear += lin.weight_params * block.num_hidden_layers
    for lin in tower.projector:
        out.append(ParamTensor(f"vision.{lin.name}", (lin.out_features, lin.in_features), tower.mergers, "vision_linear"))
        linear += lin.weight_params * tower.mergers
    unused_rest = tower.unused_params - unused * sum(x.weight_params for x in block.block_linears)
    out.append(ParamTensor("vision_tower", (spec.vision_params - linear - unused_rest,), 1, "vision"))
    if unused_rest:
        out.append(ParamTensor("vision_unused", (unused_rest,), 1, "vision_unused"))
    return out


def _slice_out(spec: ModelSpec, name: str) -> int:
    d = spec.head_dim
    return spec.num_attention_heads * d if name == "q_proj" else spec.num_key_value_heads * d


def valid_target_names(spec: ModelSpec) -> list[str]:
    names = [lin.name for lin in spec.block_linears]
    if any(lin.name == spec.fused_qkv for lin in spec.block_linears):
        names += list(_QKV_NAMES)
    if any(lin.name == spec.fused_gate_up for lin in spec.block_linears):
        names += list(_GATE_UP_NAMES)
    return list(dict.fromkeys(names + ["lm_head", "embed_tokens", ALL_LINEAR]))


def resolve_adapters(spec: ModelSpec, scenario: Scenario, fuse_qkv_slices: bool,
                     fused_experts: bool = False) -> list[Adapter]:
    """The adapters a scenario's ``lora_targets`` put on this model (empty for full fine-tuning).

    ``all-linear`` = every linear in the decoder blocks except the MoE router, not ``lm_head``
    (peft ``INCLUDE_LINEAR_LAYERS_SHORTHAND``). Llama-style names select slices of fused projections
    (``q_proj`` on GPT-NeoX ``query_key_value``), as lit-gpt's LoRAQKVLinear does. ``fused_experts``:
    the experts are transformers 5's 3-D parameters, which ``all-linear`` reaches only through PEFT's
    conversion (:func:`_all_linear_moe`).
    """
    if scenario.method is Method.FULL:
        return []
    targets = set(scenario.lora_targets)
    by_name = {lin.name: lin for lin in spec.block_linears}
    adapters: list[Adapter] = []
    used: set[str] = set()

    def add(lin: Linear, out: int | None = None) -> None:
        # lit-gpt adapts a fused qkv linear as its three slices (lit_gpt/lora.py LoRAQKVLinear with
        # enable_lora=(True, True, True): lora_A is (3r, in))
        k = len(_QKV_NAMES) if fuse_qkv_slices and lin.name == spec.fused_qkv else 1
        adapters.append(Adapter(lin.name, lin.in_features, out or lin.out_features, lin.count, k, layers=lin.layers))

    for lin in spec.block_linears:
        if ALL_LINEAR in targets and fused_experts and (
                lin.group in ("expert", "router") or lin.name in spec.peft_moe_names):
            adapters.extend(_all_linear_moe(spec, lin))
            continue
        if ALL_LINEAR in targets and lin.group != "router":
            add(lin)
            continue
        if lin.name in targets and fused_experts and lin.group == "expert" and not spec.peft_moe_names:
            # a bare 3-D bank (Llama4TextExperts.down_proj, transformers v5.24.0 modeling_llama4.py) is no module:
            # target_modules match module names, and PEFT converts none for this family (peft_moe_names)
            used.add(lin.name)
            continue
        if lin.name in targets:
            add(lin)
            used.add(lin.name)
            continue
        adapters.extend(_slice_adapters(spec, lin, targets, used, fuse_qkv_slices))
    h = spec.hidden_size
    if "lm_head" in targets:
        vocab = (spec.lm_head_params or spec.embedding_params) // h
        adapters.append(Adapter("lm_head", h, vocab, 0))
        used.add("lm_head")
    if "embed_tokens" in targets:
        adapters.append(Adapter("embed_tokens", spec.embedding_params // h, h, 0))
        used.add("embed_tokens")
    unknown = targets - used - {ALL_LINEAR} - set(by_name)
    if unknown:
        raise ScenarioError(
            "lora_targets",
            f"{', '.join(sorted(unknown))} is not a linear layer of this model",
            valid_target_names(spec),
        )
    if not adapters:
        raise ScenarioError("lora_targets", "selects no layer of this model", valid_target_names(spec))
    return adapters


def _slice_adapters(spec: ModelSpec, lin: Linear, targets: set[str], used: set[str], fuse: bool) -> list[Adapter]:
    """Llama-style names on a fused projection: adapters on its q/k/v or gate/up slices (lit-gpt's
    LoRAQKVLinear; ``fuse`` = one adapter for all slices); marks the names used."""
    slices = []
    if lin.name == spec.fused_qkv:
        slices = [n for n in _QKV_NAMES if n in targets]
    elif lin.name == spec.fused_gate_up:
        slices = [n for n in _GATE_UP_NAMES if n in targets]
    if not slices:
        return []
    used.update(slices)
    if lin.name == spec.fused_gate_up:
        sizes = [lin.out_features // 2] * len(slices)
    else:
        sizes = [_slice_out(spec, n) for n in slices]
    if fuse:
        return [Adapter(lin.name, lin.in_features, sum(sizes), lin.count, len(slices))]
    return [Adapter(lin.name, lin.in_features, size, lin.count) for size in sizes]


def _all_linear_moe(spec: ModelSpec, lin: Linear) -> list[Adapter]:
    """``all-linear`` on a transformers-5 expert or router linear, as PEFT v0.21.2 resolves it
    (utils/transformers_weight_conversion.py _convert_peft_config_moe): where the family is converted
    (``spec.peft_moe_names``) the router weight gets a rank-r wrapper, the fused gate/up a rank-2r
    one and down_proj a rank-r one, per expert; elsewhere the fused experts and the router (not
    nn.Linear in transformers 5) get nothing, and so do the linears whose names PEFT moved to the
    experts (DeepSeek's shared experts and dense MLPs: gate_proj, up_proj, down_proj)."""
    if not spec.peft_moe_names or lin.group not in ("expert", "router"):
        return []
    if lin.group == "router":
        return [Adapter(lin.name, lin.in_features, lin.out_features, 1, layers=lin.layers, param_wrapper=True)]
    experts = [x for x in spec.block_linears if x.group == "expert"]
    down = mlp_down(spec, experts)  # by position: gate and up are as wide as the hidden size when
    if lin is down:                 # moe_intermediate_size equals it, and are still one rank-2r gate_up_proj
        return [Adapter(lin.name, lin.in_features, lin.out_features, lin.count, layers=lin.layers, param_wrapper=True)]
    ups = [x for x in experts if x is not down]
    if lin is not ups[0]:
        return []  # gate and up held apart in the spec (w1, w3) are one gate_up_proj parameter
    out = sum(x.out_features for x in ups)
    return [Adapter(lin.name, lin.in_features, out, lin.count, slices=2, layers=lin.layers, param_wrapper=True)]


def adapter_tensors(adapters: list[Adapter], rank: int, layers: int) -> list[ParamTensor]:
    """LoRA A and B tensors of every adapter."""
    out: list[ParamTensor] = []
    for ad in adapters:
        out.extend(ad.tensors(rank, layers))
    return out


def mlp_down(spec: ModelSpec, lins: Iterable[Linear]) -> Linear | None:
    """The MLP's output linear among ``lins``: the last one back to the hidden size (a fused gate/up bank listed
    before it can be as wide as the hidden size too, 2 x moe_intermediate_size = hidden_size)."""
    return next((lin for lin in reversed(list(lins)) if lin.out_features == spec.hidden_size), None)
