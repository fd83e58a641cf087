"""The simulator picks SDPA's backend as the scenario's card would: on a card without the flash backend grouped-query
SDPA runs the math kernel (its inner matmuls below SDPA's autocast wrapper, not cast down), and the estimator agrees
(estimate/attention.py ``gqa_math_on_card``)."""

import pytest

pytest.importorskip("torch")

from vramfit.estimate import estimate  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402
from vramfit.sim import simulate  # noqa: E402

SC = {"model": "meta-llama/Llama-3.2-1B", "framework": "hf", "method": "lora", "lora_rank": 16,
      "lora_targets": ["all-linear"], "precision": "fp16-mixed", "micro_batch_size": 2, "seq_len": 1024,
      "gradient_checkpointing": "none", "attention": "sdpa"}


@pytest.mark.parametrize(("gpu", "backend"), [("t4", "math"), ("a100-80gb-sxm", "flash")])
def test_the_backend_follows_the_card_and_the_estimate_follows_the_trace(gpu, backend):
    sc = {**SC, "gpu": gpu}
    sim = simulate(sc)
    ran = [a for a in sim.result.assumptions if a.startswith("SDPA backends")]
    assert len(ran) == 1 and f": {backend} (" in ran[0] and "," not in ran[0].split(": ", 1)[1]
    est = estimate(parse_scenario(sc)).peak.allocated_bytes
    assert abs(est - sim.result.peak.allocated_bytes) / sim.result.peak.allocated_bytes < 0.002
