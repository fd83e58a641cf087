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
start/end tokens are part of ``seq_len``'s text, as the estimator counts them. Qwen3-VL (dense and MoE) runs the
same way, with each temporal patch of a video framed by its own start/end tokens (processing_qwen3_vl.py); its
DeepStack add indexes the hidden states with the placeholder mask (models/qwen3_vl/modeling_qwen3_vl.py
``Qwen3VLTextModel._deepstack_process``), a mask computed from the constant ids alone, so its row count is known.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from vramfit.errors import ModelError
from vramfit.scenario import Scenario

#: model types fed this way
GRID_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe")
#: elements of the largest integer tensor kept as a constant: the micro-batch's ids
_CONSTANT_LIMIT = 1 << 24


@dataclass(frozen=True)
class Media:
    """One modality's part of a sample: ``count`` entries of ``grid`` patches behind ``tokens`` placeholders."""

    modality: str  # "image" or "video": transformers' keyword prefix (utils/generic.py accepts_precomputed_kwargs)
    grid: tuple[int, int, int]  # (t, h, w) patches of one entry
    tokens: int  # placeholder tokens of one entry
    count: int
    token_id: int
    groups: int = 1  # runs of placeholders, each framed by start / end (Qwen3-VL: one per temporal patch of a video)


@dataclass(frozen=True)
class GridInputs:
    media: tuple[Media, ...]
    start_id: int
    end_id: int
    pixel_width: int  # channels x temporal_patch_size x patch x patch
    merge: int
    window: int
    patch: int
    windowed: bool = True  # Qwen2.5-VL's window index; Qwen2-VL attends over each whole image

    def batch(self, vocab: int, B: int, S: int, dtype: torch.dtype, device: str
              ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(input_ids, labels, keyword arguments) of one micro-batch of ``S`` text and the placeholders."""
        row = [x for m in self.media for _ in range(m.count * m.groups)
               for x in (self.start_id, *[m.token_id] * (m.tokens // m.groups), self.end_id)]
        # the estimator's language-model tokens: the placeholders, and the framing of every run but the first,
        # whose start / end are text of seq_len (vlm_tokens.video_tokens)
        n = sum(m.count * (m.tokens + 2 * (m.groups - 1)) for m in self.media)
        text = [11 + t % 1000 for t in range(S + n - len(row))]  # ordinary text ids, no special token
        with constants_kept():
            ids = torch.tensor([row + text] * B, device=device)
            labels = torch.tensor([[-100] * len(row) + text] * B, device=device)
        kwargs: dict = {}
        if not self.windowed:
            # Qwen2VLModel.compute_3d_position_ids refuses a grid without the processor's mm_token_type_ids, and
            # its get_rope_index builds a tensor from 0-d results fake tensors cannot give; the (3, B, S) int64
            # positions it returns are passed instead, with text positions as values (the shape is what
            # memory sees; Qwen2.5-VL's forward, fed no token types, takes text positions too)
            with constants_kept():
                kwargs["position_ids"] = torch.arange(S + n, device=device).expand(3, B, -1)
        for m in self.media:
            kwargs.update(self._pixels(m, B, dtype, device))
        return ids, labels, kwargs

    def _pixels(self, m: Media, B: int, dtype: torch.dtype, device: str) -> dict:
        """One modality's pixels, grid and precomputed window index (Qwen2_5_VLModel.get_image_features /
        get_video_features pop ``<modality>_window_index``, ``<modality>_cu_window_seqlens``)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from transformers.vision_utils import get_vision_window_index

        grids = [list(m.grid)] * (B * m.count)
        patches = B * m.count * m.grid[0] * m.grid[1] * m.grid[2]
        pixels = "pixel_values" if m.modality == "image" else "pixel_values_videos"
        out = {pixels: torch.empty(patches, self.pixel_width, dtype=dtype, device=device)}
        with constants_kept():
            out[f"{m.modality}_grid_thw"] = torch.tensor(grids, device=device)
        if not self.windowed:  # Qwen2VLModel.get_image_features reads the grid alone
            return out
        with unset_fake_temporarily():  # outside the fake mode: boolean indexing on real integers
            index, cu_window = get_vision_window_index(torch.tensor(grids), self.merge, self.window, self.patch)
            index, cu_window = index.tolist(), cu_window.tolist()
        with constants_kept():
            out[f"{m.modality}_window_index"] = torch.tensor(index, device=device)
            out[f"{m.modality}_cu_window_seqlens"] = torch.tensor(cu_window, dtype=torch.int32, device=device)
        return out


def grid_inputs(config: dict, sc: Scenario) -> GridInputs:
    """The sample's images (``images_per_sample``) and video (``frames_per_sample``) as Qwen2.5-VL reads them;
    patch, merge and processor facts from the tower's description (models/hf_vlm.py), as the estimator reads them."""
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.models.vlm_tokens import qwen_grid, video_grid, video_tokens

    tower = spec_from_hf_config(config).vision
    image_config = tower.image_config if tower is not None else config
    vision = image_config.get("vision_config") or {}
    keys = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    image_id, video_id, start, end = (config.get(k) for k in keys)
    if not all(isinstance(x, int) for x in (image_id, video_id, start, end)):
        raise ModelError(f"config.json lacks one of {', '.join(keys)}: the placeholders cannot be placed")
    merge, patch = int(vision.get("spatial_merge_size", 2)), int(vision.get("patch_size", 14))
    t = int(vision.get("temporal_patch_size", 2))
    media = []
    if sc.images_per_sample:
        gh, gw = qwen_grid(image_config, sc.image_height, sc.image_width)
        media.append(Media("image", (1, gh, gw), gh * gw // merge ** 2, sc.images_per_sample, image_id))
    if sc.frames_per_sample:
        video = video_tokens(image_config, sc.frames_per_sample, sc.image_height, sc.image_width)
        grid = video_grid(image_config, sc.frames_per_sample, sc.image_height, sc.image_width)
        groups = grid[0] if image_config.get("video_frame_markers") else 1
        media.append(Media("video", grid, video.features, 1, video_id, groups))
    return GridInputs(tuple(media), start, end, int(vision.get("in_channels", 3)) * t * patch * patch, merge,
                      int(vision.get("window_size", 112)), patch, config.get("model_type") == "qwen2_5_vl")


@contextlib.contextmanager
def constants_kept(numel: int = 0) -> Iterator[None]:
    """While the forward runs: the ids and grid (and what is computed from them alone) keep their values;
    ``numel``: the largest such tensor when it exceeds the ids' limit (Idefics3's pixel values, sim/images.py)."""
    from torch._subclasses import fake_tensor

    old = fake_tensor.CONSTANT_NUMEL_LIMIT
    fake_tensor.CONSTANT_NUMEL_LIMIT = max(_CONSTANT_LIMIT, numel)
    try:
        yield
    finally:
        fake_tensor.CONSTANT_NUMEL_LIMIT = old
