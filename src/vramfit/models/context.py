"""The model's trained context: the one rule ``vramfit estimate`` (an assumption line) and ``vramfit fit`` (beside the
longest sequence) state it by.

The context is ``ModelSpec.max_position_embeddings``, read from the config's ``max_position_embeddings`` (else
``seq_length`` or ``n_positions``: models/hf_config_cfg.py ``_common``), the length transformers' configs document as
"the maximum sequence length that this model might ever be used with" (transformers v5.24.0
utils/auto_docstring.py l. 761-764, the ``max_position_embeddings`` argument every config documents). A generic decoder sized from ``params``
(models/generic.py) has no trained context: its 4,096 is a placeholder, so nothing is said of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vramfit.models.spec import ModelSpec

#: the ``origin`` of a spec made up from a parameter count (vramfit.estimate.resolve_spec)
GENERIC_ORIGIN = "generic"


def trained_context(spec: ModelSpec, origin: str) -> int:
    """The tokens the model was trained to (0: unknown, or a generic decoder's placeholder)."""
    return 0 if origin == GENERIC_ORIGIN else spec.max_position_embeddings


def trained_to(context: int) -> str:
    """The words both commands say it in."""
    return f"the model was trained to {context:,}"


def past_context_note(seq_len: int, context: int) -> str | None:
    """The assumption line of a ``seq_len`` longer than the trained context (None when within it or unknown)."""
    if not context or seq_len <= context:
        return None
    return (f"seq_len {seq_len:,} is past the model's context ({trained_to(context)} tokens, max_position_embeddings "
            f"in its config): memory is counted for {seq_len:,} tokens, but positions past {context:,} were never "
            "trained; extend the context (rope_scaling) or shorten the sequences.")
