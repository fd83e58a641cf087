"""A setup that fails on the GPU: Liger's fused loss on a PEFT model under accelerate's FSDP2 with an untied lm_head.

Liger's fused linear cross-entropy never calls ``lm_head``: its ``lce_forward`` (the ``*ForCausalLM.forward`` the
HF Trainer's ``use_liger_kernel`` patches in; linkedin/Liger-Kernel v0.5.2 src/liger_kernel/transformers/model/
llama.py, ``LigerForCausalLMLoss(hidden_states=..., lm_head_weight=self.lm_head.weight, ...)``) reads the weight
only. Under FSDP2 a parameter is the unsharded tensor only between its unit's pre-forward hook and its reshard;
before that it is the sharded DTensor (torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_param_group.py
``_to_sharded``/``_to_unsharded``). accelerate 1.15 makes ``[final norm, lm_head]`` one unit, gathered by the
norm's pre-forward (utils/fsdp_utils.py ``fsdp2_prepare_model`` l. 857-885), but finds the norm with
``_find_final_norm``, which looks at the direct children of ``getattr(model, model.base_model_prefix)``: on a PEFT
model that is the ``*ForCausalLM`` itself (PeftModel forwards ``base_model_prefix`` = "model" and ``model`` to the
wrapped model), whose children are the decoder and ``lm_head``, no norm. So under LoRA/QLoRA the tail unit is
``lm_head`` alone, nothing gathers it before the loss, and the matmul gets the DTensor: ``aten.mm.default got mixed
torch.Tensor and DTensor``. The simulator, running accelerate's own ``fsdp2_prepare_model`` and a PEFT model, hits
exactly that. Tied embeddings put the embedding first in the tail unit, whose pre-forward gathers the shared weight
at forward's start; full fine-tuning finds the norm: both run.
"""

from __future__ import annotations

from vramfit.errors import ScenarioError
from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Loss, Method, Scenario


def check_fused_head_unit(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> None:
    """One ScenarioError where the run fails as the module docstring says; nothing otherwise."""
    from vramfit.estimate.fsdp2 import fsdp2_shards

    # fsdp-grad-op too: reshard_after_forward=False keeps a unit unsharded only after its pre-forward has run
    if (sc.loss is Loss.FUSED and profile.fsdp2_tail_unit and fsdp2_shards(sc, profile, grad_op=True)
            and sc.method is not Method.FULL and spec.lm_head_params):
        raise ScenarioError(
            "loss", "fused (Liger) reads lm_head.weight without calling lm_head, and accelerate's FSDP2 makes an "
            "untied lm_head of a PEFT model a unit of its own, so the weight is still a sharded DTensor and the "
            "run fails (aten.mm got mixed torch.Tensor and DTensor); use loss standard or chunked, fsdp_version 1, "
            "or full fine-tuning", ["standard", "chunked"])
