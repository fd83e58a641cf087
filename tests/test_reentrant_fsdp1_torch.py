"""The torch behaviour estimate/reentrant_fsdp1.py rests on, run for real on CPU/gloo with two ranks: a reentrant
checkpoint around FSDP1 units whose FlatParameter is frozen (adapters wrapped as units of their own, as peft's
fsdp_auto_wrap_policy does) keeps every processed block's input and its input gradient until the end of backward.
transformers <= 4.51's layer loop runs the checkpoint that way (``_gradient_checkpointing_func(decoder_layer.__call__,
...)`` on the FSDP-wrapped layer); the model here is torch only, five blocks of a frozen linear and a trainable
low-rank adapter. Backward's allocations are traced with vramfit's live-storage tracker, and the bf16 tensors of a
block input's shape alive when each block's re-run starts are counted (a saved input appears when backward first
touches it, through its detached copy)."""

from __future__ import annotations

import functools

import pytest

from two_ranks import spawn_two

pytestmark = pytest.mark.slow

LAYERS, HIDDEN, TOKENS = 5, 64, 32


def _seen() -> dict:
    """What each rank computes (two_ranks.spawn_two)."""
    return {(reentrant, fsdp): _live_per_block(reentrant, fsdp) for reentrant in (True, False) for fsdp in (True, False)}


def _live_per_block(reentrant: bool, fsdp: bool) -> list[int]:
    """Live bf16 (1, TOKENS, HIDDEN) tensors when each block's re-run starts, top block first."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, _or_policy, lambda_auto_wrap_policy
    from torch.utils.checkpoint import checkpoint

    from vramfit.sim.trace import LiveTracker

    class Adapter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(HIDDEN, 4, bias=False), nn.Linear(4, HIDDEN, bias=False)

        def forward(self, x):
            return self.b(self.a(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Linear(HIDDEN, HIDDEN, bias=False).requires_grad_(False)
            self.adapter = Adapter()

        def forward(self, x):
            return x + torch.relu(self.w(x) + self.adapter(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(128, HIDDEN).requires_grad_(False)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.head = nn.Linear(HIDDEN, 128, bias=False).requires_grad_(False)

        def forward(self, ids):
            h = self.emb(ids).requires_grad_(True)  # as enable_input_require_grads
            for block in self.blocks:  # transformers <= 4.51 LlamaModel.forward's loop
                h = checkpoint(block.__call__, h, use_reentrant=reentrant)
            return self.head(h).float().logsumexp(-1).mean()

    torch.manual_seed(0)
    net = Net().to(torch.bfloat16)
    blocks = list(net.blocks)
    if fsdp:
        adapters = functools.partial(lambda_auto_wrap_policy,
                                     lambda_fn=lambda m: isinstance(m, nn.Linear) and m.weight.requires_grad)
        policy = functools.partial(_or_policy, policies=[adapters, ModuleWrapPolicy({Block})])
        net = FSDP(net, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
    tracker, in_backward, marks = LiveTracker(), [], []
    for b in blocks:  # fires inside the checkpointed forward, i.e. in the re-run during backward
        b.w.register_forward_pre_hook(lambda *_: marks.append(len(tracker.trace.events)) if in_backward else None)
    loss = net(torch.randint(0, 128, (1, TOKENS)))
    in_backward.append(True)
    with tracker:
        loss.backward()
    trace, counts = tracker.trace, []
    for mark in marks:
        live: dict[int, None] = {}
        for e in trace.events[:mark]:
            if e < 0:
                live.pop(~e, None)
            else:
                live[e] = None
        counts.append(sum(1 for s in live if trace.shapes[s] == (1, TOKENS, HIDDEN) and trace.dtypes[s] == "bfloat16"))
    return counts


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    return spawn_two(_seen, tmp_path_factory.mktemp("reentrant"))


def test_reentrant_around_fsdp1_units_keeps_every_processed_block_input_and_gradient(runs):
    # from the top block down: one more input and one more gradient each time
    assert runs[(True, True)] == [1, 3, 5, 7, 9]
    # the lowest block: its input and the L - 1 above it, and L - 1 gradients (the one passed down among them)
    assert runs[(True, True)][-1] == LAYERS + (LAYERS - 1)


def test_without_fsdp_or_reentrance_nothing_is_kept(runs):
    assert runs[(True, False)] == [1, 2, 2, 2, 2]  # the block's own input and the gradient passed down
    assert runs[(False, True)] == [0, 1, 1, 1, 1] == runs[(False, False)]


def test_the_estimator_adds_the_gradients_beyond_the_top_block_position():
    """estimate/reentrant_fsdp1.py: the estimator's top-block position already holds every block input and one
    gradient; the lowest block's adds the L - 2 gradients between (9 - 5 - 1 = 3 here)."""
    from transformers import LlamaConfig

    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.reentrant_fsdp1 import retained_input_grads
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    cfg = LlamaConfig(vocab_size=128, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    spec = spec_from_hf_config(cfg.to_dict())
    tokens = TOKENS * 16  # 512 x 64 x 2 B = 64 KiB per block input, a multiple of the allocator's 512 B
    for version, reentrant, held in (("transformers-4.44", "auto", LAYERS - 2), ("transformers-4.44", "no", 0),
                                     ("transformers-4.53", "auto", 0), (None, "yes", 0)):
        sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "precision": "bf16-true",
                             "lora_targets": ["q_proj", "v_proj"], "num_gpus": 2, "parallelism": "fsdp",
                             "fsdp_version": "1", "seq_len": tokens, "use_reentrant": reentrant, "gradient_checkpointing": "full",
                             **({"framework_version": version} if version else {})})
        assert retained_input_grads(spec, sc, scenario_profile(sc)) == held * tokens * HIDDEN * 2, (version, reentrant)
