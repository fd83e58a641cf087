"""Image inputs of Qwen2.5-VL's simulated step: the forward reads values, not only shapes.

transformers v5.24.0 models/qwen2_5_vl/modeling_qwen2_5_vl.py computes from ``image_grid_thw`` and the
token ids: the tower's rotary positions and attention segments (vision_utils.py
``get_vision_position_ids``, ``get_vision_cu_seqlens``: ``tolist``, ``repeat_interleave``), its SDPA
splits (``Qwen2_5_VLVisionAttention``: ``lengths.tolist()``), the language model's 3-D rotary positions
(``compute_3d_position_ids`` scans the ids for vision-start and image tokens). Fake tensors hold no
values, but FakeTensorMode keeps a real copy of a tensor made from Python data (``torch.tensor``) when it
has at most ``CONSTANT_NUMEL_LIMIT`` elements and runs ops on such constants for real (torch 2.13
``_subclasses/fake_tensor.py``). The ids and the grid are made so, with the limit raised while the forward
runs: the integer bookkeeping runs for real on the CPU, the floating tensors stay fake. The window index
(``get_vision_window_index``: boolean indexing, which fake tensors refuse even on constants) is computed
before, outside the fake mode, and passed in as the keyword arguments transformers pops
(``window_index``, ``cu_window_seqlens``). Each image is ``<|vision_start|>``, its image tokens and
``<|vision_end|>``, at the start of the sequence (as the chat template puts it before the text); the
start/end tokens are part of ``seq_len``'s text, as the estimator counts them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from vramfit.errors import ModelError
from vramfit.scenario import Scenario

#: model types fed this way
GRID_FAMILIES = ("qwen2_5_vl",)
#: elements of the largest integer tensor kept as a constant: the micro-batch's ids
_CONSTANT_LIMIT = 1 << 24


@dataclass(frozen=True)
class GridInputs:
    grid: tuple[int, int, int]  # (t, h, w) patches of one image
    tokens_per_image: int
    images_per_sample: int
    image_token_id: int
    start_id: int
    end_id: int
    pixel_width: int  # channels x temporal_patch_size x patch x patch
    merge: int
    window: int
    patch: int

    def batch(self, vocab: int, B: int, S: int, dtype: torch.dtype, device: str
              ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(input_ids, labels, keyword arguments) of one micro-batch of ``S`` text and the image tokens."""
        from transformers.vision_utils import get_vision_window_index

        n = self.images_per_sample * self.tokens_per_image
        image = [self.start_id, *[self.image_token_id] * self.tokens_per_image, self.end_id]
        row = image * self.images_per_sample
        text = [11 + t % 1000 for t in range(S + n - len(row))]  # ordinary text ids, no special token
        grids = [list(self.grid)] * (B * self.images_per_sample)
        with constants_kept():
            ids = torch.tensor([row + text] * B, device=device)
            labels = torch.tensor([[-100] * len(row) + text] * B, device=device)
            grid = torch.tensor(grids, device=device)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # outside the fake mode: boolean indexing on real integers
            index, cu_window = get_vision_window_index(torch.tensor(grids), self.merge, self.window, self.patch)
            index, cu_window = index.tolist(), cu_window.tolist()
        with constants_kept():
            window_index = torch.tensor(index, device=device)
            cu_window_seqlens = torch.tensor(cu_window, dtype=torch.int32, device=device)
        patches = B * self.images_per_sample * self.grid[0] * self.grid[1] * self.grid[2]
        return ids, labels, {
            "pixel_values": torch.empty(patches, self.pixel_width, dtype=dtype, device=device),
            "image_grid_thw": grid, "window_index": window_index, "cu_window_seqlens": cu_window_seqlens,
        }


def grid_inputs(config: dict, sc: Scenario) -> GridInputs:
    from vramfit.models.vlm_tokens import qwen_grid

    vision = config.get("vision_config") or {}
    ids = [config.get(k) for k in ("image_token_id", "vision_start_token_id", "vision_end_token_id")]
    if not all(isinstance(x, int) for x in ids):
        raise ModelError("config.json lacks image_token_id / vision_start_token_id / vision_end_token_id: "
                         "the image placeholders cannot be placed")
    gh, gw = qwen_grid(config, sc.image_height, sc.image_width)
    merge, patch = int(vision.get("spatial_merge_size", 2)), int(vision.get("patch_size", 14))
    t = int(vision.get("temporal_patch_size", 2))
    return GridInputs((1, gh, gw), gh * gw // merge ** 2, sc.images_per_sample, *ids,
                      int(vision.get("in_channels", 3)) * t * patch * patch, merge,
                      int(vision.get("window_size", 112)), patch)


@contextlib.contextmanager
def constants_kept() -> Iterator[None]:
    """While the forward runs: the ids and grid (and what is computed from them alone) keep their values."""
    from torch._subclasses import fake_tensor

    old = fake_tensor.CONSTANT_NUMEL_LIMIT
    fake_tensor.CONSTANT_NUMEL_LIMIT = _CONSTANT_LIMIT
    try:
        yield
    finally:
        fake_tensor.CONSTANT_NUMEL_LIMIT = old
