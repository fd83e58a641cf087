"""What runs a mixture-of-experts block's experts (scenario ``moe_kernel``), and what transformers 4's loop costs.

transformers v4.55.0 models/gpt_oss/modeling_gpt_oss.py ``GptOssExperts.forward`` trains with a Python loop
(l. 93-113): ``expert_hitted = ....nonzero()`` (l. 100) yields one-element index tensors, and
``current_state @ self.gate_up_proj[expert_idx]`` (l. 105), ``gated_output @ self.down_proj[expert_idx]`` (l. 111)
index the 3-D banks with them. Advanced indexing copies: each expert hit makes a ``(1, H, 2I)`` and a
``(1, I, H)`` copy of its weights, and the matmul keeps the copy for the gradient of its input, so a block's
backward starts with every hit expert's weights copied once more (the bias rows' copies feed an add, which keeps
nothing). A CPU run of that forward on small shapes under ``saved_tensors_hooks`` keeps exactly one storage of
each copy per expert hit, and its backward calls ``new_zeros`` with each bank's shape once per expert. Where the banks train
(full fine-tuning), each copy's ``IndexBackward0`` (torch v2.13.0 autograd/generated/Functions.h: it keeps the
indices and the bank's sizes only) returns ``index_backward(grad.new_zeros(self.sizes()), ...)``
(tools/autograd/derivatives.yaml ``index.Tensor``): a zero-filled gradient the size of the whole bank, one per
expert, summed in place into autograd's input buffer for the bank (torch/csrc/autograd/input_buffer.cpp
``accumulate``). While that buffer holds the bank's gradient, the next expert's zero-filled bank is the
extra transient.

``moe_kernel: megablocks`` is ``from_pretrained(use_kernels=True)`` on a model that ``kernelize`` saw on a CUDA
device (transformers v4.55.0 modeling_utils.py l. 5085-5093 kernelizes on ``model.device.type``;
integrations/hub_kernels.py l. 63-80 maps ``MegaBlocksMoeMLP`` for cuda and rocm only, and kernels v0.9.0
layer.py l. 880-888 keeps the model's own forward for any other device). kernels-community/megablocks
(huggingface/kernels-community@885c7a29 megablocks/torch-ext/megablocks/layers.py ``forward_once``,
``permute_and_compute``, ``mlp_forward``) bins the ``top_k x tokens`` rows per expert (``binned_gather`` to
``(E, capacity, H)`` with capacity ``int(1.0 x top_k x tokens / E)``) and runs ``torch.bmm`` on the banks
themselves: the same row-sized tensors as the grouped path the activation walk counts, no weight copies, and
the bank gradients made once by the matmul backward.
"""

from __future__ import annotations

from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, MoeKernel, Scenario


def indexed_loop(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """The experts run transformers 4's indexed per-expert loop (module doc)."""
    return spec.experts_v4_indexed_loop and profile.experts_v4_forward and sc.moe_kernel is MoeKernel.NONE


def _banks(spec: ModelSpec) -> list:
    return [lin for lin in spec.block_linears if lin.group == "expert"]


def experts_hit(spec: ModelSpec, sc: Scenario) -> int:
    """Experts a micro-batch reaches: every one once ``top_k x tokens`` rows can cover them (an upper bound
    where routing leaves some idle)."""
    return min(spec.num_experts, spec.num_experts_per_tok * sc.micro_batch_size * sc.seq_len)


def weight_copies_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, elem: int) -> int:
    """Bytes of the indexed expert weight copies one block keeps for backward (``elem`` bytes each)."""
    if not indexed_loop(spec, sc, profile):
        return 0
    per_expert = sum(lin.weight_params // lin.count for lin in _banks(spec))
    return elem * experts_hit(spec, sc) * per_expert


def index_backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, grad_bytes: int) -> int:
    """The zero-filled bank an expert's ``IndexBackward0`` makes while the bank's summed gradient is held, plus that
    expert's own weight gradient it scatters in; 0 where the banks do not train or the loop does not run."""
    if sc.method is not Method.FULL or not indexed_loop(spec, sc, profile):
        return 0
    largest = max(_banks(spec), key=lambda lin: lin.weight_params)
    return grad_bytes * (largest.weight_params + largest.weight_params // largest.count)


def note(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> str | None:
    """The assumption line for a MoE model's experts path, or None for a dense model."""
    if not spec.num_experts:
        return None
    if indexed_loop(spec, sc, profile):
        return ("MoE experts: transformers 4's training loop indexes each expert's weights out of the 3-D banks, "
                "a copy per expert kept for backward (moe_kernel=none; megablocks = the kernels hub's MegaBlocksMoeMLP).")
    if sc.moe_kernel is MoeKernel.MEGABLOCKS:
        return "MoE experts: the kernels hub's MegaBlocksMoeMLP (tokens binned per expert, batched matmuls on the banks)."
    return None


# --- Llama 4's every-token experts: where the top block's backward peaks ---------------------------------------
# transformers v5.24.0 models/llama4/modeling_llama4.py Llama4TextMoe.forward runs the routed experts
# (Llama4TextExperts: one bmm over (experts, tokens, hidden), l. 79-84) and then the shared expert, summed in place
# (``out.add_(routed_out...)``, l. 172-173). Autograd's engine runs ready nodes by decreasing sequence number
# (torch v2.13.0 csrc/autograd/engine.cpp ``CompareNodeTaskTime``), so the shared expert, built later, runs its whole
# backward first and frees what it kept. The experts' backward then starts with ``bmm(up * act(gate), down_proj)``:
# its backward makes the down bank's gradient and frees its saved ``up * act(gate)`` before the product's
# backward (two more (experts x tokens, I) gradients) is the block's working set. The simulator's trace of a
# 4-layer interleaved model (tests/sim/test_sim_new_families.py) peaks right there: the top block's shared-expert
# tensors and experts' down input gone, the shared expert's and the down bank's gradients made (28.3 MB with the
# output layer's), where an average layer's gradients and every kept tensor were +4.2 %.


def every_token_top_freed(spec: ModelSpec, saved_items: dict[str, float]) -> int:
    """Bytes of the top block's saved tensors freed before its experts' working set (see above): the experts'
    down input (``mlp_mid``) and everything the shared expert kept (``shared.*``); 0 for other MoE paths."""
    from vramfit.estimate.allocator import round_allocation

    if not spec.experts_run_every_token:
        return 0
    return sum(round_allocation(v) for k, v in saved_items.items() if k == "mlp_mid" or k.startswith("shared."))


def every_token_top_grads(spec: ModelSpec, sc: Scenario, grad_bytes: int) -> int:
    """Full fine-tuning: the gradients the top block has made at that moment, each an allocation of its own: the
    shared expert's linears and the experts' down bank; 0 where the rule does not apply."""
    from vramfit.estimate.allocator import round_allocation

    if not spec.experts_run_every_token or sc.method is not Method.FULL:
        return 0
    from vramfit.estimate.activations import mlp_down

    down = mlp_down(spec, _banks(spec))
    made = [lin for lin in spec.block_linears if lin.group == "shared_expert"] + ([down] if down else [])
    return sum(round_allocation(lin.params * grad_bytes) for lin in made)


def lowest_block_pending(spec: ModelSpec, grad_bytes: int) -> int:
    """Full fine-tuning: gradient bytes of the decoder blocks not made yet while the lowest walked block runs its
    MLP backward (``step._lowest_block_grads``): that block's linears but its MLP output one (and, with every-token
    experts, its shared expert's, made first: see above), and where dense layers sit below the lowest MoE layer
    (``spec.first_moe_layer``: DeepSeek's ``first_k_dense_replace``, Llama 4's interleaving) every linear and norm
    of those, whose backward comes after it. The recomputed block of that position is the MoE one (the larger),
    so the high point is the lowest MoE block, not layer 0: the simulator's Llama 4 trace with checkpointing peaks
    in layer 1's experts with layer 0's and layer 1's other gradients not made (+8.8 % counting them made)."""
    from vramfit.estimate.activations import mlp_down
    from vramfit.estimate.allocator import round_allocation

    below = spec.first_moe_layer
    # the walked block's own linears: every layer's, plus the MoE ones where dense layers lie below it
    own = [x for x in spec.block_linears if not x.layers or (below and x.group != "dense_mlp")]
    made = [mlp_down(spec, [x for x in own if x.group in ("mlp", "expert")])]
    if spec.experts_run_every_token:
        made += [x for x in own if x.group == "shared_expert"]
    later = sum(round_allocation(x.params * grad_bytes) for x in own if not any(x is m for m in made))
    if below:
        dense = [x for x in spec.block_linears if x.group in ("attn", "dense_mlp")]
        later += below * (sum(round_allocation(x.params * grad_bytes) for x in dense)
                          + round_allocation(spec.block_norm_params * grad_bytes))
    return later


def dense_layer0_grads(spec: ModelSpec, sc: Scenario, lowest_grads: int, grad_bytes: int) -> int:
    """Full fine-tuning where dense layers lie below the lowest MoE layer: the gradients alive while the dense layer 0
    runs its MLP backward, every one but that block's own (its MLP output linear's made) and the input
    embedding's: ``lowest_grads`` (at the lowest MoE block) plus what :func:`lowest_block_pending` leaves out there,
    less what layer 0 still owes. A high point of its own beside the lowest MoE block's, with the dense block's
    recompute and copies (moe_lora.position_kinds): the simulator's tiny DeepSeek-V3 and GLM-4-MoE (layer 0 dense,
    bf16, checkpointing) peak there, the estimate 1.2 % and 4.0 % short at the lowest MoE block alone. 0 elsewhere."""
    from dataclasses import replace

    from vramfit.estimate.moe_lora import kind_block

    if not lowest_grads or sc.method is not Method.FULL or not spec.first_moe_layer or spec.is_moe_layer(0):
        return 0
    dense = replace(kind_block(spec, False), first_moe_layer=0)
    return lowest_grads + lowest_block_pending(spec, grad_bytes) - lowest_block_pending(dense, grad_bytes)
