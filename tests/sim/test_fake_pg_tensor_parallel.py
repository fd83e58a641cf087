"""A node-sized world (8 ranks) on a fake process group (torch 2.13 ``FakeStore`` + the ``fake`` backend: the
collectives return at once, the shapes are real) running PyTorch's own FSDP2 (``fully_shard`` with bf16
``MixedPrecisionPolicy``) and DTensor tensor parallel (``parallelize_module`` with torchtitan's Llama plan:
SequenceParallel norms, PrepareModuleInput to Replicate, Colwise wq/wk/wv/w1/w3, Rowwise wo/w2 to Shard(1),
vocab-parallel embeddings and output) on a tiny Llama, on the CPU. Rank 0's sharded parameters and the
tensors autograd saves in forward are compared with the estimator's per-rank figures.

The estimator models the CUDA kernels; on the CPU ``nn.RMSNorm`` runs the composite path, which keeps the
fp32 normalised tensor for the weight's gradient (4 bytes per element, where CUDA's saved copy is the bf16 one),
the final norm as the blocks' norms; the embedding keeps its int64 token ids.
Those CPU-only bytes are derived tensor by tensor below and are the whole difference (without them the
estimate is 10.5 %, 9.7 % and 8.4 % under the CPU run at tp 1, 2, 4; with them, exact to the byte).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from vramfit.estimate import estimate_spec  # noqa: E402
from vramfit.models import spec_from_hf_config  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402

H, NH, KV, FF, L, V, S, WORLD = 256, 8, 4, 768, 2, 1024, 512, 8
HD = H // NH
CONFIG = {"model_type": "llama", "hidden_size": H, "num_attention_heads": NH, "num_key_value_heads": KV,
          "intermediate_size": FF, "num_hidden_layers": L, "vocab_size": V, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"}


class Attention(nn.Module):  # torchtitan models/llama3 Attention up to v0.2.1: repeat_kv, then SDPA (torchtitan-0.2.1)
    def __init__(self):
        super().__init__()
        self.wq, self.wk = nn.Linear(H, NH * HD, bias=False), nn.Linear(H, KV * HD, bias=False)
        self.wv, self.wo = nn.Linear(H, KV * HD, bias=False), nn.Linear(NH * HD, H, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, HD) for w in (self.wq, self.wk, self.wv))
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(H, FF, bias=False), nn.Linear(FF, H, bias=False), nn.Linear(H, FF, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.attention = nn.RMSNorm(H), Attention()
        self.ffn_norm, self.feed_forward = nn.RMSNorm(H), FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, H)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(L)})
        self.norm, self.output = nn.RMSNorm(H), nn.Linear(H, V, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


def _block_plan():  # torchtitan parallelize_llama apply_tp, per block (sequence parallel on)
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {"attention_norm": SequenceParallel(), "attention": gather, "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)), "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel()}


def _parallel_model(tp: int):
    mesh = init_device_mesh("cpu", (WORLD // tp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Llama()
    if tp > 1:
        parallelize_module(model, mesh["tp"], {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)})
        for layer in model.layers.values():
            parallelize_module(layer, mesh["tp"], _block_plan())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers.values():  # torchtitan apply_fsdp: each block a unit, then the root
        fully_shard(layer, mesh=mesh["dp"], mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp, reshard_after_forward=False)
    return model


def _local(t):
    return t._local_tensor if isinstance(t, DTensor) else t


def measure(tp: int) -> tuple[int, int, int]:
    """(sharded parameter bytes, saved activation bytes, whole-sequence bf16 linear inputs) of rank 0."""
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=WORLD)
    try:
        model = _parallel_model(tp)
        params = sum(_local(p).nbytes for p in model.parameters())
        seen: set = set()
        saved, gathered = [0], [0]

        def pack(t):
            lt, fn = _local(t), type(getattr(t, "grad_fn", None)).__name__
            if fn == "TBackward0" or (lt.dim() == 1 and lt.shape[0] == H):
                return t  # FSDP's all-gathered weights, freed after forward (counted as buffers, not here)
            try:
                key = (lt.untyped_storage().data_ptr(), lt.untyped_storage().nbytes())
                size = key[1]
            except RuntimeError:  # an AsyncCollectiveTensor (the all-gathered input of the output layer)
                key, size = ("async", id(lt)), lt.numel() * lt.element_size()
            if key not in seen:
                seen.add(key)
                saved[0] += size
                gathered[0] += lt.dtype is torch.bfloat16 and tuple(lt.shape[-2:]) == (S, H)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(torch.randint(0, V, (1, S)))
        return params, saved[0], gathered[0]
    finally:
        dist.destroy_process_group()


def cpu_only_bytes(tp: int) -> int:
    """Bytes the CPU kernels keep that the CUDA path the estimator models does not (module docstring)."""
    T = S // tp  # tokens per rank on the sequence-parallel norms
    norms = (2 * L + 1) * (4 - 2) * T * H  # fp32 normalised tensor instead of the bf16 one, blocks' and final
    return norms + 8 * S  # + int64 token ids (replicated over TP)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_fsdp2_plus_tensor_parallel_rank_matches_the_estimate(tp):
    params, saved, gathered = measure(tp)
    sc = parse_scenario({"model": "tiny-llama", "method": "full", "framework": "torchtitan", "parallelism": "fsdp",
                         "num_gpus": WORLD, "tensor_parallel": tp, "seq_len": S, "framework_version": "torchtitan-0.2.1"})
    r = estimate_spec(sc, spec_from_hf_config(CONFIG), "tiny-llama")
    forward = dict(next(p for p in r.phases if p.phase == "forward").breakdown)
    # parameters: fp32 shards of 1/(dp) of each TP shard, the norms' weights whole on every TP rank as torchtitan
    # keeps them (the final norm's too, counted whole on the last stage)
    assert r.component("master_weights") == params
    # activations: the estimator's per-rank layout plus the CPU kernels' own tensors, exactly
    assert forward["activations"] + cpu_only_bytes(tp) == saved
    # every layer's wq/wk/wv and w1/w3 inputs, and the output layer's, are all-gathered and kept whole
    assert gathered == 2 * L + 1
