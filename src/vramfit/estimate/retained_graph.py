"""What a training loop keeps of the previous micro-batch while the next one runs its forward.

litgpt's loop binds the model output to a local that lives until the next forward returns
(Lightning-AI/litgpt@5895df10 litgpt/finetune/lora.py fit() l. 276: `logits = model(input_ids,
lm_head_chunk_size=128)`; lit-gpt@8641822 finetune/lora.py l. 216 the same): the logits' grad_fn keeps the
previous autograd graph alive through the whole next forward. Backward frees a node's saved tensors
(torch v2.13.0 torch/csrc/autograd/python_function.cpp PyNode::release_variables clears
``saved_variables`` only), but bitsandbytes <= 0.43.1 keeps the 4-bit matmul's input as a plain ctx
attribute (bitsandbytes 0.42.0 autograd/_functions.py l. 522-523 MatMul4Bit.forward: `if
any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)`), which no backward frees: the input of every 4-bit
linear of the previous micro-batch is still allocated when the next forward reaches its own peak.

The running-loop replica (litgpt@5895df10 model.py and lora.py on CPU, every nn.Linear through a copy of
that MatMul4Bit, forward + backward, then the bytes still allocated while ``logits`` lives) keeps 0 bytes per
layer with plain frozen Linears and, with 4-bit ones, per token and layer 11.38 x hidden bytes on
Llama-2-7B (qkv input, attention output, MLP input, the 11008-wide product), 12 x hidden on phi-2 and
falcon-7b (one shared norm output), 14 x hidden on stablelm-base-alpha-3b (two norms); this module
counts the same keys of the block walk (``Saved.q_inputs``).

Only when every micro-batch may reach ``seq_len``: lit-gpt@8641822 forces the longest sample into the
first micro-batch (``profile.longest_sample_first``), which has no previous graph, and the later ones
are shorter than it, so the peak is the first micro-batch's and nothing is added. Under activation
checkpointing the recomputed matmuls keep their inputs the same way; not modelled (no measurement).

The logits themselves (``profile.loop_carry`` LOGITS): the fp32 logits Fabric returned (``loss.held``) die only when
``logits = model(...)`` rebinds the name after the call has returned (Lightning@71aed75 fabric/wrappers.py
_FabricModule.forward: ``output = self._precision.convert_output(output)`` inside the call); torchtune 0.1's loop
keeps its shifted fp32 copy (``loss.kept``) the same way (torchtune@c69fba18b recipes/lora_finetune_single_device.py
l. 447 ``logits = self._model(input_ids)``; modules/transformer.py l. 210 ``self.output(h).float()``). So forward's
high point is the largest of (:func:`carried_logits_forward`): a block's, or the output layer's where it is the
de-quantized weight (the 16-bit logit chunks made before the last beside it), with the carried logits; the call's
end, where the new logits and their fp32 conversion sit beside them (the 16-bit list is rebound only when
convert_output returns); the loss after the call, with them freed (``loss.forward_peak``). The estimate used to add
the loss moment to the de-quantized weight, which never coexist.

The CPU replica of litgpt@5895df10 lora.py's loop (its model.py and lora.py, bf16-true, the conversion as Fabric does
it, a storage-level live-bytes tracker, V = 32,000) peaks in the second micro-batch's forward 4.00 TV bytes above the
first's (6.45 -> 10.45 TV at B x T = 512 and 1,024, TV = B x T x V): the carried fp32 logits, at the call's end. With
its head run as bitsandbytes 0.42.0 MatMul4Bit (fp16 de-quantized output, then ``.to(bf16)``; h = 1,024, T = 512) the
forward peaks at the last head chunk, 125.0 MiB of de-quantized copies + 23.4 MiB of earlier chunks + the blocks'
activations, and 63.5 MiB higher with the carried logits (62.5 MiB) and the previous head input (``ctx.tensors``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.activations import dtypes_for
from vramfit.estimate.allocator import largest_weight, round_allocation
from vramfit.estimate.constants import LITGPT_LM_HEAD_CHUNK
from vramfit.estimate.loss import head_calls, logits_bytes_per_element, vocab_rows
from vramfit.estimate.profile_fields import LoopCarry
from vramfit.scenario import Checkpointing, Method, Quantize

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def previous_step_inputs(step: Step) -> int:
    """Bytes of the previous micro-batch's 4-bit matmul inputs alive through the next forward (0: none): where the loop
    keeps a tensor with a ``grad_fn`` (``LoopCarry.keeps_graph``): litgpt's ``logits`` (LOGITS) and llama-recipes'
    ``outputs`` and ``loss`` alike (OUTPUTS; meta-llama/llama-recipes@1e0f8a1f utils/train_utils.py l. 88-105, no
    ``del``), so bitsandbytes <= 0.43.1 MatMul4Bit's nodes, and their ``ctx.tensors`` that backward does not free,
    live on (tests/estimate/test_outputs_keep_graph.py traces both loops)."""
    sc, profile, spec = step.sc, step.profile, step.spec
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    if not (quantized and profile.qlora_saves_input and profile.loop_carry.keeps_graph):
        return 0
    if profile.longest_sample_first or sc.gradient_checkpointing is not Checkpointing.NONE:
        return 0
    saved = step.acts.saved
    per_layer = sum(round_allocation(saved.items[k]) for k in saved.q_inputs)
    head = 0
    if profile.qlora_quantizes_lm_head:  # the 4-bit head's input, the final norm's output (model_extra_saved)
        head = round_allocation(dtypes_for(sc, profile, spec).compute * sc.micro_batch_size * sc.seq_len
                                * spec.hidden_size)
    return per_layer * spec.num_hidden_layers + head


def carried_logits(step: Step) -> int:
    """Bytes of the logits a LOGITS loop carries into the next forward (module docstring): litgpt's (``loss.held``),
    torchtune 0.1's shifted copy (``loss.kept``), fp32, 4 TV; 0 elsewhere and where the recipe puts its longest sample
    first (as above)."""
    if step.profile.loop_carry is not LoopCarry.LOGITS or step.profile.longest_sample_first:
        return 0
    return step.loss.held + step.loss.kept


def carried_logits_forward(step: Step, at_block: int) -> tuple[int, int, int] | None:
    """(logits_loss, temporaries, carried logits) at forward's high point where the loop carries its fp32 logits into
    the next forward (module docstring); ``at_block``: a block's forward temporaries. None elsewhere (forward then adds
    ``loss.forward_peak`` and ``at_block``), and where the recipe puts its longest sample first (as above)."""
    sc, profile, spec, loss = step.sc, step.profile, step.spec, step.loss
    if not (carried := carried_logits(step)):
        return None
    lb = logits_bytes_per_element(sc, profile)
    logits = lb * sc.micro_batch_size * sc.seq_len * vocab_rows(spec)
    # the call's end: the new 16-bit logits and their fp32 copy (as large as the carried ones) beside them; `.to(fp32)`
    # of fp32 logits is the tensor itself
    call_end = (logits if lb != 4 else 0) + carried
    moments = [(loss.forward_peak, 0, 0), (call_end, 0, carried), (0, at_block, carried)]
    head = spec.lm_head_params or spec.embedding_params
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    if step.dequant and quantized and profile.qlora_quantizes_lm_head and largest_weight(spec) == head:
        # the 4-bit head de-quantized for its last chunk, the chunks before it made (lit-gpt lora.py GPT.forward)
        before = lb * sc.micro_batch_size * LITGPT_LM_HEAD_CHUNK.value * vocab_rows(spec) * (head_calls(sc, profile) - 1)
        moments.append((before, step.dequant, carried))
    return max(moments, key=sum)
