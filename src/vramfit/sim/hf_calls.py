"""The two transformers calls whose form changed between releases, shared by the simulator (sim/build.py) and the
real-GPU harness (measure/build.py): building without SDPA where the model has none, and turning checkpointing on.
No torch import here: both only call the model's own methods."""

from __future__ import annotations

from typing import Any

from vramfit.errors import ScenarioError


def with_eager_fallback(build: Any, attn: str, notes: list[str]) -> Any:
    """``build(attn)``; where transformers has no SDPA for the model (Gemma-2 in transformers 5 raises ValueError),
    ``build("eager")`` with a note, as ``from_pretrained`` picks without an ``attn_implementation``. The simulator and
    ``vramfit measure`` (measure/build.py) both build through it."""
    try:
        return build(attn)
    except (ValueError, ImportError):
        if "sdpa" not in attn:
            raise
        model = build("eager")
        notes.append(f"{model.config.model_type} has no SDPA attention in this transformers: eager ran instead.")
        return model


def enable_hf_checkpointing(model: Any, offload: bool = False) -> None:
    """The model's own checkpointing as HF Trainer turns it on: ``activation_checkpointing_enable`` (transformers
    >= 5.24, kwargs None = non-reentrant), else ``gradient_checkpointing_enable`` with ``use_reentrant=False``
    (transformers 5.17 on the H200 measured by benchmarks/gpu_grid.py has no activation_checkpointing_enable)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=None, offload=offload)
        return
    if offload:
        raise ScenarioError("gradient_checkpointing", "offload runs transformers >= 5.24's "
                            "activation_checkpointing_enable(offload=True); this transformers has none",
                            ["none", "full", "selective"])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
