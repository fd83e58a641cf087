"""What a block saves, as keyed tensors (:class:`Saved`), and the dtypes its tensors take (:func:`dtypes_for`):
the records estimate/activations.py walks a block with (re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vramfit.estimate.framework import FrameworkProfile, adapter_bytes, casts_params, runs_under_autocast
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Precision, Scenario

if TYPE_CHECKING:
    from vramfit.estimate.profile_fields import ForcedFp32


@dataclass
class Saved:
    """Named saved tensors of one block; a key is counted once however many ops save it."""

    items: dict[str, int] = field(default_factory=dict)
    mlp_start: int = 0  # items from this index on are the MLP's (block_saved walks it last)
    # keys of the inputs the block's 4-bit matmuls keep as ctx attributes (blk.q_saves), not as saved tensors:
    # backward does not free them (estimate/retained_graph.py)
    q_inputs: set[str] = field(default_factory=set)
    # keys the norms after the attention keep (pre-MLP norm, Gemma 2/3's post-attention and post-MLP norms) in a
    # sequential block: their backward runs before the attention's, so they are freed by its softmax backward
    after_attention: tuple[str, ...] = ()

    @property
    def freed_before_sink_softmax_backward(self) -> int:
        """Saved bytes of the block that autograd has freed (each node's once it has run, retain_graph=False)
        when the working set of a sink softmax's backward peaks: the MLP's (its backward runs first),
        o_proj's input, the probabilities ``probs @ v`` kept and the softmax's own output (the simulator's
        trace of gpt-oss: the three [B, H, S, S + 1] gradients alive, none of those)."""
        return self._mlp_bytes + sum(self.items.get(k, 0) for k in ("attn_out", "attn.probs", "attn.softmax_out"))

    @property
    def freed_before_softmax_backward(self) -> int:
        """Saved bytes of the block that autograd has freed when an eager fp32 softmax's backward runs: the MLP's,
        o_proj's input, and what ``probs @ v`` and dropout kept (their nodes ran first); the softmax's own output
        stays until its node has run (block_extras.block_backward_transient)."""
        keys = ("attn_out", "attn.probs", "attn.dropout_out", "attn.dropout_mask", *self.after_attention)
        return self._mlp_bytes + sum(self.items.get(k, 0) for k in keys)

    @property
    def _mlp_bytes(self) -> int:
        return sum(list(self.items.values())[self.mlp_start:]) if self.mlp_start else 0

    def add(self, key: str, nbytes: int) -> None:
        if nbytes > 0 and key not in self.items:
            self.items[key] = nbytes

    @property
    def total(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class Dtypes:
    compute: int  # activations / matmul outputs
    residual: int  # the residual stream between blocks
    norm_out: int  # output of the norms that feed linears
    adapter: int
    autocast: bool
    mlp: int  # the gated MLP's saved products (gate, act, up)
    attn: int  # q, k, v and the attention kernel's output


def forced_fp32(spec: ModelSpec | None, scenario: Scenario, profile: FrameworkProfile) -> ForcedFp32 | None:
    """What the framework's forced-float32 mode keeps in fp32 for ``spec``'s model type, None where it does not run:
    the model type on ``profile.fp16_forced_fp32`` and fp16 asked for, whatever the method (unslothai/unsloth@6a83bb53a5
    unsloth/models/loader.py l. 677-689 sets ``UNSLOTH_FORCE_FLOAT32`` from the model type and dtype alone, and
    vision.py l. 341-345 turns it into ``do_forced_float32`` with no look at ``full_finetuning``)."""
    if spec is None or scenario.precision not in (Precision.FP16_TRUE, Precision.FP16_MIXED):
        return None
    return dict(profile.fp16_forced_fp32).get(spec.model_type)


def dtypes_for(scenario: Scenario, profile: FrameworkProfile, spec: ModelSpec | None = None) -> Dtypes:
    """Element sizes of the tensors in a block (of ``spec``'s language model; none given: of no listed family).

    ``-mixed``: fp32 weights under autocast, so the residual stream and norm outputs are fp32 and
    each linear casts its input to 16 bits, unless the framework casts the parameters themselves
    (:func:`casts_params`: every weight, LoRA's included, is then 16-bit in the step). QLoRA under PEFT's
    ``prepare_model_for_kbit_training``: embeddings and norms are fp32 (peft other.py:202), so the residual
    stream is fp32 as well. A model type in ``profile.fp16_forced_fp32`` asked for in fp16 runs the framework's
    forced-float32 mode: 16-bit weights and norm outputs, no autocast, fp32 where its ``ForcedFp32`` says."""
    c = scenario.precision.compute_bytes
    if (forced := forced_fp32(spec, scenario, profile)) is not None:
        return Dtypes(compute=c, residual=4 if forced.residual else c, norm_out=c,
                      adapter=adapter_bytes(profile, scenario.precision), autocast=False,
                      mlp=4 if forced.mlp else c, attn=4 if forced.attention else c)
    cast = casts_params(scenario, profile)
    fp32_stream = (scenario.precision.mixed and not cast) or scenario.precision is Precision.FP32 or (
        scenario.method is Method.QLORA and profile.qlora_unquantized_fp32 and not cast
    )
    res = 4 if fp32_stream else c
    return Dtypes(
        compute=c,
        residual=res,
        norm_out=res,
        adapter=c if cast else adapter_bytes(profile, scenario.precision),
        autocast=runs_under_autocast(scenario, profile) and not cast,  # nothing left to cast once the params are
        mlp=c,
        attn=c,
    )
