"""FSDP1 block units that mix a block's frozen weights and its LoRA adapters in one FlatParameter.

Lightning 2.1 sets ``use_orig_params=True`` (pytorch-lightning@2.1.0.rc0 src/lightning/fabric/strategies/fsdp.py
l. 177) and lit-gpt@8641822 finetune/lora.py wraps each ``Block`` as a unit (``auto_wrap_policy={Block}``), so
the adapters share their block's FlatParameter (``profile.fsdp_lora_block_units``)."""

from __future__ import annotations

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.core import Parts
from vramfit.estimate.framework import FrameworkProfile, casts_params
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Parallelism, Quantize, Scenario


def mixed_block_units(sc: Scenario, profile: FrameworkProfile) -> bool:
    """LoRA adapters sharing their block's FSDP1 FlatParameter with its frozen weights (use_orig_params=True)."""
    return (sc.method is not Method.FULL and profile.fsdp_lora_block_units and sc.quantize is Quantize.NONE
            and not profile.fsdp2 and sc.shard_group > 1 and sc.parallelism in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP))


def block_units_numel(spec: ModelSpec, parts: Parts) -> int:
    """Elements of every block unit together: the blocks' frozen weights and norms plus the adapters."""
    return (sum(lin.params * spec.layers_of(lin) for lin in spec.block_linears)
            + spec.num_hidden_layers * spec.block_norm_params + parts.num_trainable)


def mixed_unit_backward_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts) -> int:
    """Gradient bytes one block's backward makes beside any held gradient when its FlatParameter mixes frozen
    weights and adapters: two whole units in the flat parameter's dtype.

    FSDP1 with use_orig_params runs forward on plain views of the unsharded FlatParameter (torch v2.1.0
    distributed/fsdp/flat_param.py ``_use_unsharded_views`` l. 1817-1830, views from ``torch.split``
    in ``_get_unflat_views_unaligned``), so every weight of the unit requires grad: autograd computes the
    weight gradient of each frozen linear too, buffers them all for the split's backward, which concatenates
    them into the whole flat gradient (split_with_sizes_backward: cat) before AccumulateGrad adds it to the
    held one. Traced on CPU/gloo (2 ranks, bf16 Llama block 4,211,712 elements, LoRA q/v in the unit, no_sync
    micro-batch with gradients held): at the backward peak the seven frozen weights' mm outputs (one unit,
    8,423,424 B) and the cat output (8,423,424 B) are alive together (tests/test_fsdp1_no_sync_torch.py)."""
    if not mixed_block_units(sc, profile):
        return 0
    cast = casts_params(sc, profile) or (profile.fsdp_mixed_casts_params and not sc.precision.mixed)
    per = sc.precision.compute_bytes if cast else sc.precision.param_bytes
    return 2 * round_allocation(block_units_numel(spec, parts) // spec.num_hidden_layers * per)
