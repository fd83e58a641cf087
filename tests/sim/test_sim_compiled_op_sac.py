"""torchtitan's op-level selective AC under ``compile: true``: AOTAutograd keeps only what the backward reads.

Eager SAC caches the output of every op its policy marks MUST_SAVE (torch v2.13.0 utils/checkpoint.py
``_CachingTorchDispatchMode``). A compiled block is one joint graph that torch/_functorch/partitioners.py
``min_cut_rematerialization_partition`` splits into forward and backward, saving a MUST_SAVE node only where the
backward graph reads it. The down projection's output feeds only the residual add, whose backward reads nothing, so
compiled blocks do not keep it (estimate/block_extras.py ``op_sac_saved``, ``_feeds_residual_only``).

Here a transformers Llama decoder layer runs under the simulator's own copy of torchtitan's policy
(sim/checkpointing.py ``_op_sac_context``) and is compiled with inductor's decompositions and partitioner, its
forward graph only captured (no code generation): its saved tensors are read off the graph's outputs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from simconfigs import tiny  # noqa: E402

from vramfit.estimate import estimate  # noqa: E402
from vramfit.estimate.allocator import round_allocation  # noqa: E402
from vramfit.estimate.block_extras import op_sac_saved  # noqa: E402
from vramfit.estimate.framework import scenario_profile  # noqa: E402
from vramfit.models.hf_config import spec_from_hf_config  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402
from vramfit.sim import checkpointing  # noqa: E402

T = 64  # tokens (one sequence)


def _layer():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg_dict = tiny("meta-llama/Llama-3.2-1B", layers=1, hidden=128, vocab=256)
    cfg = LlamaConfig(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    rope = LlamaRotaryEmbedding(cfg)
    return cfg_dict, layer, rope


def _saved_mm_outputs(compiled: bool) -> list[tuple[int, ...]]:
    """Shapes of the 2-D (tokens x width) matmul outputs the block keeps for backward: eager, those the policy caches;
    compiled, those among the partitioned forward graph's saved outputs."""
    from torch.utils.checkpoint import checkpoint

    cfg, layer, rope = _layer()
    x = torch.randn(1, T, 128, dtype=torch.bfloat16, requires_grad=True)
    pos = rope(x, torch.arange(T)[None])
    cached: list[tuple[int, ...]] = []
    real = checkpointing._op_sac_context

    def context():  # the simulator's policy, recording what eager SAC caches
        fwd, rec = real()
        policy = fwd.policy_fn

        def spy(ctx, func, *args, **kwargs):
            out = policy(ctx, func, *args, **kwargs)
            if func == torch.ops.aten.mm.default and not ctx.is_recompute and out.name == "MUST_SAVE":
                cached.append((args[0].shape[0], args[1].shape[1]))
            return out

        fwd.policy_fn = spy
        return fwd, rec

    def block(h):
        out = layer(h, position_embeddings=pos)
        return out[0] if isinstance(out, tuple) else out

    def run(h):
        return checkpoint(block, h, use_reentrant=False, context_fn=context, preserve_rng_state=False)

    if not compiled:
        run(x).float().sum().backward()
        return sorted(cached)
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    saved: list[tuple[int, ...]] = []

    def forward_graph(gm, inputs):
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        for node in outs[1:]:  # the block's output first, then what the backward reads
            val = getattr(node, "meta", {}).get("val")
            if val is not None and val.dim() == 2 and val.shape[0] == T and node.op != "placeholder":
                saved.append(tuple(val.shape))
        return gm

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=forward_graph, bw_compiler=lambda gm, inputs: gm,
                           partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table())
    torch.compile(run, backend=backend)(x).float().sum().backward()
    return sorted(saved)


def test_a_compiled_block_keeps_no_down_projection_output():
    eager, compiled = _saved_mm_outputs(False), _saved_mm_outputs(True)
    # q_proj (4 heads x 32), v_proj (2 kv heads x 32), gate_proj (256) and down_proj (128): the 1st, 3rd, 5th, 7th mm
    assert eager == sorted([(T, 128), (T, 64), (T, 256), (T, 128)])
    assert compiled == sorted([(T, 128), (T, 64), (T, 256)])  # down_proj's output is gone
    # the estimator keeps the same matmul outputs (bf16), both ways
    cfg, _, _ = _layer()
    spec = spec_from_hf_config(cfg)
    base = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "precision": "bf16-true", "micro_batch_size": 1,
            "seq_len": T, "gradient_checkpointing": "selective-op", "framework": "torchtitan"}
    attn = round_allocation(2 * T * 4 * 32) + round_allocation(4 * T * 4)  # SDPA's output and fp32 log-sum-exp
    for shapes, compile_ in ((eager, False), (compiled, True)):
        sc = parse_scenario({**base, "compile": compile_})
        assert op_sac_saved(spec, sc, scenario_profile(sc)) - attn == sum(round_allocation(2 * a * b) for a, b in shapes)


def test_compiled_llama_8b_keeps_four_gib_less_at_torchtitans_benchmark():
    """TITAN_BENCH_2412-1 / -2 (Llama 3.1 8B, FSDP2 on 8 H100s, 2 x 8,192 tokens): 32 down projections' bf16
    outputs of 16,384 x 4,096, 4 GiB, leave the loss backward's peak; the benchmark reads 5.4 GiB less reserved."""
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed", "micro_batch_size": 2,
          "seq_len": 8192, "gradient_checkpointing": "selective-op", "attention": "flash", "num_gpus": 8,
          "parallelism": "fsdp", "framework": "torchtitan", "framework_version": "torchtitan-2024"}  # the runs' 9dec370
    eager, compiled = estimate(sc), estimate({**sc, "compile": True})
    assert eager.peak.allocated_bytes - compiled.peak.allocated_bytes == 32 * 16384 * 4096 * 2
    said = [a for a in compiled.assumptions if a.startswith("torch.compile: each decoder block compiled; the final "
                                                            "norm, output layer and loss eager")]
    assert len(said) == 1 and said[0].endswith("not its down projection's output, which eager SAC caches.")
    assert not [a for a in eager.assumptions if a.startswith("torch.compile")]
    # its loss is torchtitan's own loss_fn, not transformers' ForCausalLMLoss (profile standard_loss_site)
    assert "Loss: model-dtype logits, fp32 upcast in torchtitan's loss_fn (cross_entropy of pred.float())." in \
        eager.assumptions


def test_the_simulator_traces_a_compiled_scenario_eagerly_and_says_so():
    """The simulator runs no torch.compile: it traces compile: false and sets that run's estimate beside it
    (sim/engine.py ``as_eager``), not the compiled one's 4 GiB lower figure above."""
    from vramfit.sim.engine import EAGER_TRACED, as_eager

    sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan",
                         "gradient_checkpointing": "selective-op", "compile": True})
    traced, note = as_eager(sc)
    assert traced.compile is False and traced.framework is sc.framework and note[0].startswith(EAGER_TRACED)
    assert as_eager(traced) == (traced, [])


def _runtime_saved(compiled: bool, hidden: int = 512, inter: int = 1792, tokens: int = 256,
                   lora: bool = False) -> tuple[int, dict]:
    """Bytes of the distinct storages a transformers Llama layer (bf16, no checkpointing) saves for backward, its
    parameters and the shared rotary cos/sin left out, read at run time through autograd's saved-tensor hooks (a
    compiled graph's saved outputs pass them too, each storage once however many views)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg_dict = {**tiny("meta-llama/Llama-3.2-1B", layers=1, hidden=hidden, vocab=256), "intermediate_size": inter}
    cfg = LlamaConfig(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    if lora:  # PEFT LoRA r16 on every linear, dropout 0, fp32 adapters on the bf16 base (autocast_adapter_dtype)
        from peft import LoraConfig, inject_adapter_in_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        layer = inject_adapter_in_model(LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets), layer)
        for name, p in layer.named_parameters():
            p.requires_grad_("lora_" in name)
            if "lora_" in name:
                p.data = p.data.float()
    # a layer past the first: its input carries a gradient (the first layer's norm saves nothing for its frozen input)
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(tokens)[None])

    def run(h):
        out = layer(h, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out

    if compiled:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.partitioners import min_cut_rematerialization_partition
        from torch._inductor.decomposition import select_decomp_table

        torch._dynamo.reset()
        run = torch.compile(run, backend=aot_autograd(fw_compiler=lambda gm, i: gm, bw_compiler=lambda gm, i: gm,
                                                      partition_fn=min_cut_rematerialization_partition,
                                                      decompositions=select_decomp_table()))
    skip = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), cos, sin)}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run(x)
    y.float().sum().backward()
    return sum(saved.values()), cfg_dict


@pytest.mark.parametrize("compiled, lora, per_token", [(False, False, 25624), (True, False, 17944),
                                                        (False, True, 37848), (True, True, 26072)],
                         ids=["full-eager", "full-compiled", "lora-eager", "lora-compiled"])
def test_a_transformers_llama_layer_saves_what_the_estimator_counts(tmp_path, compiled, lora, per_token):
    """``compile: true`` under transformers (the model and the loss compiled): the min-cut partitioner keeps the
    block input and each norm's rstd where eager keeps the fp32 copies and normed tensors, and recomputes SiLU
    (estimate/norms.py, estimate/activations.py). The estimator's per-layer count is byte for byte what the layer
    saves, eager 25,624 and compiled 17,944 B per token here (block input included; 256 tokens, so that every fp32
    per-token tensor is a whole number of the allocator's 512-byte units the estimator rounds to). With PEFT LoRA on
    every linear, the compiled graph's common-subexpression elimination makes one fp32 cast of q, k and v's shared
    input and one of gate and up's, where eager PEFT casts it per linear (estimate/activations.py ``_cast_key``)."""
    import importlib
    import json

    step = importlib.import_module("vramfit.estimate.step")
    nbytes, cfg = _runtime_saved(compiled, lora=lora)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    adapters = {"lora_rank": 16, "lora_targets": ["all-linear"], "lora_dropout": 0.0} if lora else {}
    sc = parse_scenario({"model": str(path), "method": "lora" if lora else "full", "precision": "bf16-true",
                         "micro_batch_size": 1, "seq_len": 256, "attention": "sdpa", "gradient_checkpointing": "none",
                         "compile": compiled, "framework": "hf", **adapters})
    counted = step.compute(spec_from_hf_config(cfg), sc, None).per_layer
    assert nbytes == counted == 256 * per_token
