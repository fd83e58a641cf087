"""The two loss layouts transformers does not ship, on top of the HF model's decoder and ``lm_head``.

``chunked`` is torchtune's ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/ce_chunked_output_loss.py,
``num_output_chunks=8``): the output projection runs on 8 sequence chunks, each chunk's logits are
upcast to fp32 only inside its own cross-entropy. The 16-bit logits of all chunks are alive until the
loss returns; each chunk's ``log_softmax`` output (fp32) is saved for backward.

``fused`` is Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss``
(linkedin/Liger-Kernel ops/fused_linear_cross_entropy.py): the forward walks the tokens in chunks of
``next_power_of_2(ceil(BT / ceil(V / H)))`` rows, computes each chunk's logits, turns them into their
gradient in place, and accumulates ``grad_input`` (BT x H, input dtype) and, if ``lm_head`` trains,
``grad_weight`` (V x H, weight dtype); both are saved for backward, which only scales them in place.
The full logits never exist. :class:`_FusedLinearCrossEntropy` reproduces those allocations with plain
ops (Liger's Triton kernel is not run).

Both compute the hidden states with the model's own decoder (``get_decoder()``), so final-logit soft-capping
(Gemma 2) is not applied: it costs no memory in the fused kernels that support it.

Both run inside the call of the training root (the PEFT wrapper or the ``*ForCausalLM``), as the recipes do:
Liger replaces the class's forward (Liger-Kernel v0.5.2 transformers/monkey_patch.py
``modeling_llama.LlamaForCausalLM.forward = llama_lce_forward``; model/llama.py ``lce_forward`` runs
``self.model(...)`` then the fused loss on ``self.lm_head.weight``), and torchtune's output chunks are made in
``TransformerDecoder.forward`` (torchtune v0.4.0 modules/transformer.py ``chunked_output``). The root's hooks
therefore run: under FSDP2 the root unit's pre-forward all-gathers what it owns (the embedding and, without
their own unit, the final norm and ``lm_head``; torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_state.py
``_pre_forward``, whose ``_lazy_init`` also makes the first unit called the root). Calling the decoder directly
skipped them and left the embedding a sharded DTensor (``aten.embedding.default got mixed torch.Tensor and
DTensor``), an error of the simulator alone: a real run enters through the root.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from vramfit.scenario import Loss, Scenario

TORCHTUNE_OUTPUT_CHUNKS = 8
IGNORE_INDEX = -100


def chunked_or_fused_loss(built: Any, scenario: Scenario, ids: torch.Tensor, labels: torch.Tensor,
                          keep: torch.Tensor | None = None, root: Any = None) -> torch.Tensor:
    """The loss computed inside the root's own call (module docstring): the ``*ForCausalLM``'s forward is replaced
    for the call, as Liger's monkey patch replaces it, and PEFT's forward reaches it through ``self.model.forward``.
    ``keep``: a ``logits_to_keep`` mask, applied to the hidden states first (Liger-Kernel v0.6.1 model/qwen2.py
    ``kept_hidden_states = hidden_states[:, slice_indices, :]``; sim/label_mask.py). ``root``: what the loop calls
    instead of the model, such as the DeepSpeed engine that wraps it (sim/deepspeed_zero.py)."""
    return in_root_call(built, lambda: _loss_on_hidden(built, scenario, ids, labels, keep), root, ids)


def in_root_call(built: Any, body: Any, root: Any = None, ids: torch.Tensor | None = None) -> Any:
    """``body()`` run as the ``*ForCausalLM``'s forward inside the call of the training root (``root``, else the
    built model): the forward is replaced for the call (module docstring), so the root's hooks run around it."""
    causal_lm = built.causal_lm
    own = causal_lm.__dict__.get("forward")  # an instance-level forward set before (a hook, a patch) comes back
    causal_lm.forward = lambda *args, **kwargs: body()
    try:
        return (built.model if root is None else root)(input_ids=ids)
    finally:
        if own is None:
            del causal_lm.forward
        else:
            causal_lm.forward = own


def _loss_on_hidden(built: Any, scenario: Scenario, ids: torch.Tensor, labels: torch.Tensor,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    decoder = built.causal_lm.get_decoder()
    hidden = decoder(input_ids=ids).last_hidden_state
    if keep is not None:
        hidden = hidden[:, keep, :]
    head = built.lm_head
    shifted = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    n_tokens = shifted.numel()
    if scenario.loss is Loss.CHUNKED:
        logits = [head(c) for c in hidden.chunk(TORCHTUNE_OUTPUT_CHUNKS, dim=1)]
        targets = shifted.chunk(TORCHTUNE_OUTPUT_CHUNKS, dim=1)
        total = sum(
            F.cross_entropy(lg.float().reshape(-1, lg.size(-1)), t.reshape(-1), ignore_index=IGNORE_INDEX,
                            reduction="sum")
            for lg, t in zip(logits, targets, strict=True)
        )
        del logits
        return total / n_tokens
    h = hidden.reshape(-1, hidden.size(-1))
    return _FusedLinearCrossEntropy.apply(h, head.weight, shifted.reshape(-1)) / n_tokens


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Liger's fused linear + cross-entropy, allocation for allocation (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        bt, hidden = h.shape
        vocab = weight.shape[0]
        chunk = _next_power_of_2(-(-bt // -(-vocab // hidden)))
        grad_input = torch.zeros_like(h)
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        loss_1d = torch.zeros(bt, dtype=torch.float32, device=h.device)
        for start in range(0, bt, chunk):
            h_chunk = h[start:start + chunk]
            logits_chunk = h_chunk @ weight.t()  # becomes its own gradient in place (Triton kernel)
            grad_input[start:start + chunk] = logits_chunk @ weight
            if grad_weight is not None:
                grad_weight.addmm_(logits_chunk.t().to(h_chunk.dtype), h_chunk)
            del logits_chunk
        ctx.save_for_backward(grad_input, grad_weight)
        return loss_1d.sum()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, Any, None]:
        grad_input, grad_weight = ctx.saved_tensors
        grad_input.mul_(grad_output)  # Liger scales the saved gradients in place
        if grad_weight is not None:
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None
