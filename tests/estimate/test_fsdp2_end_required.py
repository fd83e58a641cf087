"""The fit figure (``peak.required_bytes``) at FSDP2's end of backward: the segments the end opens for the embedding's
gradient and the last unit's flat reduce-scatter input (estimate/fsdp2_end.py) are opened beside the blocks' cached
segments, which hold nothing by then; on a card they do not fit beside, the allocator releases those and retries
(CUDACachingAllocator.cpp ``release_cached_blocks``). The reserved figure keeps them (a card with headroom caches
them); the required one did too, so a longer sequence, whose freed loss tensors host both, needed less: Qwen2.5-7B
full under torchtune's FSDP2 on 4 GPUs needed 23.50 GiB at 1,536 tokens and 22.45 GiB at 2,048, and ``fit`` on an
RTX 4090 said 2,223 tokens fit while 1,536 did not (found by a review)."""

from vramfit import estimate
from vramfit.estimate.fsdp2_end import end_of_backward_segments
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.plan import fit
from vramfit.scenario import parse_scenario

RUN = {"model": "Qwen/Qwen2.5-7B", "method": "full", "framework": "torchtune", "parallelism": "fsdp", "num_gpus": 4,
       "gradient_checkpointing": "full", "gpu": "rtx4090"}


def _opened(seq_len: int) -> int:
    sc = parse_scenario({**RUN, "seq_len": seq_len})
    return end_of_backward_segments(compute(resolve_model(RUN["model"]).spec, sc))


def test_the_fit_figure_grows_with_the_sequence():
    runs = {s: estimate({**RUN, "seq_len": s}).peak for s in (1024, 1536, 2048, 2560)}
    required = [p.required_bytes for p in runs.values()]
    assert required == sorted(required) and required[0] < required[-1]
    # the reserved figure still reads the allocator on a card with headroom: at 1,536 tokens the end of backward opens
    # 2 segments of 1.02 GiB (152,064 x 3,584 bf16), at 2,048 the freed loss tensors (1.16 GiB) host both
    assert _opened(1536) == 2 * 1_090_519_040 and _opened(2048) == 0
    assert runs[1536].reserved_bytes > runs[2048].reserved_bytes
    # and the fit figure leaves them out: no more than the single-stream figure, the pools and the context above it
    assert runs[1536].device_bytes - runs[1536].required_bytes >= _opened(1536)


def test_fit_longest_sequence_has_every_shorter_one_fitting():
    f = fit({k: v for k, v in RUN.items() if k != "gpu"}, "rtx4090")
    limit = f.limit_bytes
    for s in range(512, f.max_seq_len + 1, 256):
        assert estimate({**RUN, "seq_len": s}).peak.required_bytes <= limit, s
