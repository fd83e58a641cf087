"""torch's own Schedule1F1B (torch.distributed.pipelining, v2.13.0) on a fake process group of 4 pipeline ranks,
rank 0 running the first stage of a tiny Llama (embeddings + blocks) on the CPU: the most micro-batches whose
activations it holds at once is what the estimator's first stage counts, ``min(p, m)``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from test_fake_pg_tensor_parallel import CONFIG, Block, H, V  # noqa: E402
from torch.distributed.pipelining import PipelineStage, Schedule1F1B  # noqa: E402

from vramfit.estimate import estimate_spec  # noqa: E402
from vramfit.models import spec_from_hf_config  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402

P, SEQ = 4, 64


class FirstStage(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Block() for _ in range(layers)])

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return h


def most_in_flight(m: int) -> int:
    """Rank 0's largest count of forwards not yet matched by their backward during one step."""
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=P)
    try:
        model = FirstStage(CONFIG["num_hidden_layers"] // P or 1).to(torch.bfloat16)
        stage = PipelineStage(model, 0, P, torch.device("cpu"), input_args=(torch.zeros(1, SEQ, dtype=torch.long),),
                              output_args=(torch.zeros(1, SEQ, H, dtype=torch.bfloat16),))
        order: list[str] = []
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
        stage.forward_one_chunk = lambda *a, **k: (order.append("F"), fwd(*a, **k))[1]
        stage.backward_one_chunk = lambda *a, **k: (order.append("B"), bwd(*a, **k))[1]
        Schedule1F1B(stage, n_microbatches=m).step(torch.randint(0, V, (m, SEQ)))
        assert order.count("F") == order.count("B") == m
        return max(order[:i].count("F") - order[:i].count("B") for i in range(len(order) + 1))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("m", [4, 8])
def test_first_stage_in_flight_is_torchs_1f1b(m):
    cfg = {**CONFIG, "num_hidden_layers": 8}
    sc = parse_scenario({"model": "tiny-llama", "method": "full", "framework": "torchtitan", "parallelism": "fsdp",
                         "num_gpus": P, "pipeline_parallel": P, "grad_accum": m, "seq_len": SEQ})
    first = estimate_spec(sc, spec_from_hf_config(cfg), "tiny-llama").ranks[0]
    assert first.role == "first stage" and first.in_flight == most_in_flight(m) == min(P, m)
