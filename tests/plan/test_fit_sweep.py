import json

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan import fit, parse_vary, sweep
from vramfit.plan.evaluate import limit_bytes

SC = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "gradient_checkpointing": "full", "seq_len": 2048}


@pytest.fixture(scope="module")
def rep():
    return fit(SC, "rtx4090")


def _dev(**k):
    return estimate({**SC, "gpu": "rtx4090", **k}).peak.device_bytes


def _need(**k):
    """The figure the verdict compares (verdict.fits): the device peak less the cached segments released on OOM."""
    return estimate({**SC, "gpu": "rtx4090", **k}).peak.required_bytes


def test_largest_micro_batch_and_longest_sequence_are_maximal(rep):
    limit = limit_bytes(get_gpu("rtx4090"), 0.05)
    assert rep.max_micro_batch >= 1 and rep.max_seq_len > 2048
    assert _need(micro_batch_size=rep.max_micro_batch) <= limit < _need(micro_batch_size=rep.max_micro_batch + 1)
    assert _need(seq_len=rep.max_seq_len) <= limit < _need(seq_len=rep.max_seq_len + 1)
    assert rep.max_seq_len_device_bytes == _dev(seq_len=rep.max_seq_len)


def test_grid_marks_what_fits(rep):
    assert len(rep.grid) == len(rep.batches) and all(len(row) == len(rep.seq_lens) for row in rep.grid)
    for row in rep.grid:
        for c in row:
            assert c.fits == (_need(micro_batch_size=c.micro_batch_size, seq_len=c.seq_len) <= rep.limit_bytes)
            assert c.device_bytes == _dev(micro_batch_size=c.micro_batch_size, seq_len=c.seq_len)
    first = rep.grid[0][0]
    assert first.device_bytes == _dev(micro_batch_size=rep.batches[0], seq_len=rep.seq_lens[0])
    json.dumps(rep.to_dict())


def test_fit_when_nothing_fits():
    r = fit({"model": "meta-llama/Llama-2-70b-hf", "method": "full"}, "rtx4090")
    assert not r.fits and r.max_micro_batch is None and r.max_seq_len is None


@pytest.mark.parametrize(
    "text, key, values",
    [
        ("seq_len=512..4096", "seq_len", [512, 1024, 2048, 4096]),
        ("seq_len=512..3000", "seq_len", [512, 1024, 2048, 3000]),
        ("seq-len=1k..4k", "seq_len", [1024, 2048, 4096]),
        ("micro_batch_size=1..4:1", "micro_batch_size", [1, 2, 3, 4]),
        ("lora_rank=8,16,64", "lora_rank", [8, 16, 64]),
        ("method=full,lora,qlora", "method", ["full", "lora", "qlora"]),
        ("loss=*", "loss", ["standard", "chunked", "fused"]),
        # keys whose range starts at 0 (no evaluation pass, no image) sweep from it, as estimate takes it
        ("eval_batch_size=0,4", "eval_batch_size", [0, 4]),
        ("images_per_sample=0..4", "images_per_sample", [0, 1, 2, 4]),
        ("frames_per_sample=0,1", "frames_per_sample", [0, 1]),
        ("dora=*", "dora", [False, True]),
    ],
)
def test_parse_vary(text, key, values):
    assert parse_vary(text) == (key, values)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("seq_len", "must look like key=a..b"),
        ("colour=1,2", "unknown scenario key 'colour'"),
        ("method=a..b", "a range a..b needs a whole-number key"),
        ("seq_len=4096..512", "below its start"),
        ("seq_len=abc..512", "is not a number"),
        ("model=*", "'*' (every value) works for finite choices and switches only"),
        ("seq_len=0,512", "seq_len: '0' must be a positive whole number"),
        ("eval_batch_size=-1,2", "eval_batch_size: '-1' must be a whole number >= 0"),
        ("eval_batch_size=0..8:0", "eval_batch_size: '0' must be a positive whole number"),
        ("seq_len=1..100000:1", "at most 200"),
        ("seq_len=", "no values"),
    ],
)
def test_parse_vary_errors_name_vary(text, fragment):
    with pytest.raises(ScenarioError) as e:
        parse_vary(text)
    assert e.value.key == "vary" and fragment in str(e.value)


def test_sweep_rows_and_errors():
    r = sweep(SC, "seq_len", [1024, 4096, 0])
    ok = [p for p in r.points if p.error is None]
    assert [p.value for p in ok] == [1024, 4096]
    assert ok[0].device_bytes < ok[1].device_bytes
    assert ok[1].device_bytes == estimate({**SC, "seq_len": 4096}).peak.device_bytes
    assert "seq_len" in r.points[2].error
    assert {"weights", "adapters", "activations"} <= set(ok[0].components)
    assert {c["gpu_id"] for c in r.cards} >= {"rtx4090", "h100-sxm"}
    d = json.loads(json.dumps(r.to_dict()))
    assert d["points"][2] == {"value": 0, "error": r.points[2].error}
    assert isinstance(d["points"][0]["peak"]["device_bytes"], int)


def test_sweep_over_models_and_enum():
    r = sweep(SC, "method", ["full", "lora", "qlora", "bogus"])
    devs = [p.device_bytes for p in r.points[:3]]
    assert devs[0] > devs[1] > devs[2] and "method" in r.points[3].error
    m = sweep(SC, "model", ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B"])
    assert m.points[0].device_bytes < m.points[1].device_bytes


def test_a_sweep_keeps_what_the_user_set_and_derives_the_rest_again():
    """--vary num_gpus keeps a chosen parallelism and --vary framework a chosen precision; what the user left to its
    default (parallelism by GPU count, precision by framework and method) follows the varied key, so every point
    is the estimate of the same keys typed by hand."""
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "parallelism": "zero3"}
    got = sweep(base, "num_gpus", [1, 4, 8])
    for point, n in zip(got.points, (1, 4, 8), strict=True):
        assert point.device_bytes == estimate({**base, "num_gpus": n}).peak.device_bytes
    plain = sweep({"model": "meta-llama/Llama-3.1-8B", "method": "full"}, "num_gpus", [1, 4])
    assert plain.points[1].device_bytes == estimate({"model": "meta-llama/Llama-3.1-8B", "method": "full",
                                                     "num_gpus": 4}).peak.device_bytes  # ddp, the default
    lora = {"model": "meta-llama/Llama-3.1-8B", "method": "lora"}
    frameworks = sweep(lora, "framework", ["hf", "litgpt", "torchtitan"])
    for point, fw in zip(frameworks.points, ("hf", "litgpt", "torchtitan"), strict=True):
        assert point.device_bytes == estimate({**lora, "framework": fw}).peak.device_bytes
    assert len({p.device_bytes for p in frameworks.points}) == 3
    pinned = sweep({**lora, "precision": "bf16-true"}, "framework", ["litgpt"]).points[0]
    assert pinned.device_bytes == estimate({**lora, "precision": "bf16-true", "framework": "litgpt"}).peak.device_bytes
    methods = sweep(lora, "method", ["full", "qlora"])
    for point, m in zip(methods.points, ("full", "qlora"), strict=True):
        assert point.device_bytes == estimate({**lora, "method": m}).peak.device_bytes


def test_a_gpu_sweep_draws_every_swept_card():
    """Sweeping gpu over rtx4090 and a10 gave the A10's point no A10 verdict (the capacity lines were the base card's
    and the common ones only)."""
    r = sweep({"model": "meta-llama/Llama-3.1-8B", "gpu": "rtx4090"}, "gpu", ["rtx4090", "a10", "no-such-card"])
    ids = [c["gpu_id"] for c in r.cards]
    assert ids[0] == "rtx4090" and "a10" in ids and len(ids) == len(set(ids))
    assert r.points[1].fits["a10"] is False and r.points[2].error and "no-such-card" in r.points[2].error
