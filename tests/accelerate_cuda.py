"""Let accelerate's FSDP plugin take its CUDA path on this GPU-less machine, whichever accelerate is installed.

`FullyShardedDataParallelPlugin.__post_init__` asks for the current CUDA device when `sync_module_states`
is on. How it asks changed between releases (accelerate/utils/dataclasses.py):
- accelerate <= 1.15: `is_cuda_available()`, then `torch.cuda.current_device()`;
- accelerate 1.16: `get_torch_accelerator_backend()`, which must name a device type other than cpu/mps.
The `make test` setup installs the newest accelerate the registry holds, so the tests patch whichever
of the two the installed module has, and fail loudly if it has neither (a third way to ask).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from unittest import mock


@contextmanager
def pretend_cuda():
    import accelerate.utils.dataclasses as dc
    import torch

    with ExitStack() as stack:
        asks = 0
        if hasattr(dc, "is_cuda_available"):
            stack.enter_context(mock.patch.object(dc, "is_cuda_available", return_value=True))
            asks += 1
        if hasattr(dc, "get_torch_accelerator_backend"):
            stack.enter_context(mock.patch.object(dc, "get_torch_accelerator_backend", return_value=("cuda", torch.cuda)))
            asks += 1
        assert asks, "accelerate.utils.dataclasses asks for CUDA in a way these tests do not know"
        stack.enter_context(mock.patch("torch.cuda.current_device", return_value=0))
        yield
