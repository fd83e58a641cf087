"""Mechanisms of the code behind published measurements (issue 13, accuracy part 3): each test derives
the bytes a mechanism adds or removes and asserts the estimator moves by exactly that."""

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import casts_params
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

L2_70B = "meta-llama/Llama-2-70b-hf"
SPEC_70B = resolve_model(L2_70B).spec


def _peft_fsdp(**keys):
    """peft docs/source/accelerate/fsdp.md 'Use PEFT and FSDP' (PEFT_DOCS-120): Llama-2-70B LoRA, 8 GPUs."""
    return parse_scenario({"model": L2_70B, "method": "lora", "precision": "bf16-mixed", "lora_targets": "all-linear",
                           "micro_batch_size": 8, "seq_len": 2048, "gradient_checkpointing": "full",
                           "attention": "flash", "num_gpus": 8, "parallelism": "fsdp", **keys})


def test_accelerate_fsdp_mixed_precision_casts_the_parameters():
    """accelerate sets FSDP MixedPrecision(param_dtype=bf16) for mixed_precision bf16: the checkpointed block
    inputs are bf16 (2 bytes), not the fp32 residual of autocast over fp32 weights (4 bytes)."""
    T, h, L = 8 * 2048, SPEC_70B.hidden_size, SPEC_70B.num_hidden_layers
    fsdp = compute(SPEC_70B, _peft_fsdp())
    assert casts_params(fsdp.sc, fsdp.profile)
    assert fsdp.acts.blocks == L * round_allocation(2 * T * h)
    ddp = compute(SPEC_70B, _peft_fsdp(parallelism="ddp"))
    assert not casts_params(ddp.sc, ddp.profile)
    assert ddp.acts.blocks == L * round_allocation(4 * T * h)
    # Lightning fabric plugins/precision/fsdp.py FSDPPrecision.mixed_precision_config keeps param_dtype
    # float32 for bf16-mixed (autocast does the 16-bit compute): litgpt's residual stays fp32
    lit = compute(SPEC_70B, _peft_fsdp(framework="litgpt"))
    assert lit.acts.blocks == L * round_allocation(4 * T * h)
    # nothing is left for autocast to cast: q/k/v (and gate/up) save their one shared bf16 input
    full = compute(SPEC_70B, _peft_fsdp(method="full", gradient_checkpointing="none"))
    assert not [k for k in full.saved.items if k.endswith("autocast_in")]
    assert full.saved.items["attn_in"] == full.saved.items["mlp_in"] == 2 * T * h


def _bloom_zero3_offload(**keys):
    """peft README a29a12701, bloomz-7b1 LoRA 'DeepSpeed with CPU Offloading' (PEFT_README-117): ZeRO-3, 1 GPU."""
    return parse_scenario({"model": "bigscience/bloomz-7b1", "method": "lora", "precision": "fp32",
                           "lora_targets": ["query_key_value"], "micro_batch_size": 8, "seq_len": 64,
                           "attention": "eager", "parallelism": "zero3", "offload": "optimizer+params", **keys})


def test_deepspeed_before_0_9_copies_the_offloaded_parameter_twice_on_one_gpu():
    """DeepSpeed v0.8.3 all_gather_coalesced copies the host partition (the whole parameter on one GPU) to the GPU,
    then gathers it into a second buffer: the largest fetch, BLOOM's tied 250880 x 4096 fp32 embedding, twice,
    when it is fetched for the output layer at the end of forward (before the logits exist)."""
    spec = resolve_model("bigscience/bloomz-7b1").spec
    embedding, block = 4 * 250880 * 4096, 4 * 4096 * 16384  # the output layer; dense_h_to_4h
    assert spec.embedding_params == 250880 * 4096
    new = compute(spec, _bloom_zero3_offload())
    old = compute(spec, _bloom_zero3_offload(framework_version="deepspeed-0.8"))
    assert new.fetch_copy == (0, 0) and old.fetch_copy == (embedding, block)
    assert old.parts.comm_buffers == new.parts.comm_buffers
    fwd = {p.phase.value: dict(p.parts) for p in old.phases}["forward"]
    assert fwd["temporaries"] == embedding - old.loss.forward_peak  # the larger of the fetch and the loss
    # several GPUs, any version: the copied partition is 1/N of the parameter
    assert compute(spec, _bloom_zero3_offload(num_gpus=8)).fetch_copy == (embedding // 8, block // 8)
    assert compute(spec, _bloom_zero3_offload(num_gpus=8, offload="optimizer")).fetch_copy == (0, 0)


def test_zero3_memory_efficient_linear_saves_every_linear_input():
    """zero.Init replaces F.linear by LinearFunctionForZeroStage3, which saves its input even for a frozen weight:
    LoRA's base linears keep the norm outputs and the MLP's act(gate) * up product (PEFT_DOCS-118). With LoRA on q and
    v only, the MLP's inputs are kept by nothing else; with all-linear LoRA each is the engine-cast 16-bit input that
    lora_A keeps already (the engine casts peft's fp32 adapters, so peft makes no fp32 copy), the same storage."""
    T, h, inter = 8 * 2048, SPEC_70B.hidden_size, 28672
    off = {"zero_optimization": {"memory_efficient_linear": False}}
    for targets, extra_want in ((["q_proj", "v_proj"], {"mlp_in": 2 * T * h, "mlp_mid": 2 * T * inter}),
                                ("all-linear", {"attn_in": 2 * T * h, "mlp_in": 2 * T * h, "mlp_mid": 2 * T * inter})):
        zero3 = compute(SPEC_70B, _peft_fsdp(parallelism="zero3", precision="bf16-true", lora_targets=targets))
        plain = compute(SPEC_70B, _peft_fsdp(parallelism="zero3", precision="bf16-true", lora_targets=targets,
                                             deepspeed_config=off))
        assert {k: v for k, v in zero3.saved.items.items() if k in extra_want} == extra_want
        added = {k: v for k, v in zero3.saved.items.items() if k not in plain.saved.items}
        assert zero3.acts.per_layer - plain.acts.per_layer == sum(round_allocation(v) for v in added.values())
    assert added == {}  # all-linear: lora_A keeps every one of those inputs already
    fsdp = compute(SPEC_70B, _peft_fsdp(precision="bf16-true"))  # FSDP keeps peft's fp32 adapters: fp32 input copies
    assert fsdp.saved.items["q_proj.lora0.cast_in"] == 4 * T * h and "q_proj.lora0.cast_in" not in zero3.saved.items


def _tune_3b(**keys):
    """torchtune README 1814feb17 'Optimization flags' (TT_README_OPT): Llama 3.2 3B, bs 2, packed 4096."""
    return parse_scenario({"model": "meta-llama/Llama-3.2-3B", "framework": "torchtune", "method": "full",
                           "micro_batch_size": 2, "seq_len": 4096, "attention": "sdpa", **keys})


def test_torchtune_recipes_that_drop_the_compiled_loss_run_it_eager():
    """torchtune v0.4.0: only lora_finetune_single_device keeps `training.compile_loss`'s result; full and
    distributed recipes run CrossEntropyLoss eager. The compiled loss saves the model's fp32 logits
    (`output(h).float()` is outside the compiled layers) and the fp32 logsumexp."""
    spec = resolve_model("meta-llama/Llama-3.2-3B").spec
    TV, T = 2 * 4096 * 128256, 2 * 4096
    full = [compute(spec, _tune_3b(compile=c)).loss for c in (False, True)]
    assert full[0] == full[1]  # full_finetune_single_device: eager either way
    lora = compute(spec, _tune_3b(method="lora", compile=True)).loss
    assert lora.saved == 4 * TV + 4 * T and lora.backward_peak == 2 * (4 * TV) + 4 * T
    lora8 = compute(spec, _tune_3b(method="lora", compile=True, num_gpus=8, parallelism="fsdp")).loss
    assert lora8 == compute(spec, _tune_3b(method="lora", num_gpus=8, parallelism="fsdp")).loss
    chunked = compute(spec, _tune_3b(compile=True, loss="chunked")).loss  # patched in place: compiled
    assert chunked.saved == 2 * TV + 4 * T


def test_bitsandbytes_quant_state_is_neither_sharded_nor_offloaded():
    """bitsandbytes >= 0.43 keeps each Linear4bit's QuantState on the module: FSDP shards (and offloads) only the
    packed 4-bit data, every GPU keeps the absmax, nested absmax and code of every layer (PEFT_DOCS-121/122)."""
    from vramfit.estimate.state import quantized_weight_bytes
    from vramfit.scenario import Quantize

    L = SPEC_70B.num_hidden_layers
    state = L * sum(round_allocation(quantized_weight_bytes(x.out_features, x.in_features, Quantize.NF4_DQ)
                                     - -(-x.in_features * x.out_features // 2)) * x.count for x in SPEC_70B.block_linears)
    keys = {"method": "qlora", "quantize": "nf4-dq", "precision": "bf16-true", "micro_batch_size": 2, "num_gpus": 2,
            "kbit_prepare": "no"}
    fsdp = compute(SPEC_70B, _peft_fsdp(**keys))
    assert fsdp.parts.quant_state == state
    offload = compute(SPEC_70B, _peft_fsdp(**keys, offload="optimizer+params"))
    assert offload.parts.quantized_base == state  # the packed data went to the host, the state stayed
    single = compute(SPEC_70B, _peft_fsdp(**{**keys, "num_gpus": 1}, parallelism="none"))
    assert single.parts.quant_state == 0  # nothing sharded: counted with the weights as before
    tune = compute(SPEC_70B, _peft_fsdp(**keys, framework="torchtune"))
    assert tune.parts.quant_state == 0  # torchao NF4Tensor shards its scalers with the data


def test_the_output_layer_gradient_is_made_whole_in_its_compute_dtype():
    """A sharded full fine-tune still makes the output layer's whole gradient in the dtype autograd computes it
    (bf16 here) before FSDP reduce-scatters or offloads it; it was sized from the per-GPU shards (1 byte per
    element at 8 GPUs). TT_README_2409-6: Llama 3.1 70B full, FSDP2 with CPU offload, 8 GPUs."""
    spec = resolve_model("meta-llama/Llama-3.1-70B-Instruct").spec
    sc = parse_scenario({"model": "meta-llama/Llama-3.1-70B-Instruct", "framework": "torchtune", "method": "full",
                         "micro_batch_size": 2, "seq_len": 2048, "gradient_checkpointing": "full", "loss": "chunked",
                         "num_gpus": 8, "parallelism": "fsdp", "offload": "optimizer+params"})
    assert compute(spec, sc).head_grad == round_allocation(2 * 128256 * 8192)
    mixed = parse_scenario({**sc.to_dict(), "framework": "hf", "precision": "bf16-mixed", "offload": "none"})
    assert compute(spec, mixed).head_grad == round_allocation(2 * 128256 * 8192)  # FSDP's bf16 parameters
    ddp = parse_scenario({**mixed.to_dict(), "parallelism": "ddp"})
    assert compute(spec, ddp).head_grad == round_allocation(4 * 128256 * 8192)  # fp32 parameters under autocast


def test_fsdp_full_fine_tune_has_an_end_of_backward_phase():
    """Every sharded gradient, one block's whole gradients (before the reduce-scatter) and, while the root unit
    waits for the embedding's gradient, the output layer's whole gradient (tests/sim/test_sim_fsdp_mixed.py checks
    the total against the simulator's FSDP2 trace)."""
    spec = resolve_model("meta-llama/Llama-2-7b-hf").spec
    keys = {"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed", "seq_len": 1024,
            "gradient_checkpointing": "full", "num_gpus": 8, "parallelism": "fsdp"}
    step = compute(spec, parse_scenario(keys))
    block = sum(x.weight_params + x.bias_params for x in spec.block_linears) + spec.block_norm_params
    assert step.block_grads == round_allocation(2 * block)  # bf16: FSDP's parameter cast
    end = {p.phase.value: dict(p.parts) for p in step.phases}["backward-end"]
    assert end["gradients"] == step.parts.gradients + step.block_grads + step.head_grad
    tune = compute(spec, parse_scenario({**keys, "framework": "torchtune", "precision": "bf16-true"}))
    end = {p.phase.value: dict(p.parts) for p in tune.phases}["backward-end"]
    assert end["gradients"] == tune.parts.gradients + tune.block_grads  # output sharded as a unit of its own
    assert compute(spec, parse_scenario({**keys, "parallelism": "ddp"})).block_grads == 0


def test_peft_method_comparison_runs_foreach_adamw():
    """peft@51c2ff666 method_comparison/MetaMathQA (PEFT_MMQA_2607): torch.optim.AdamW with no fused/foreach
    argument runs torch's foreach AdamW on CUDA, whose _foreach_sqrt copies every bf16 second moment during the step;
    the HF Trainer's default (adamw_torch_fused) has no such copy."""
    spec = resolve_model("meta-llama/Llama-3.2-3B").spec
    keys = {"model": "meta-llama/Llama-3.2-3B", "method": "full", "precision": "bf16-true", "micro_batch_size": 4,
            "seq_len": 768, "gpu": "l40s"}
    runs = [compute(spec, parse_scenario({**keys, **extra})) for extra in ({}, {"framework_version": "peft-method-comparison"})]
    step = [{p.phase.value: dict(p.parts) for p in r.phases}["optimizer-step"] for r in runs]
    assert "temporaries" not in step[0]
    assert step[1]["temporaries"] == 2 * spec.num_params == 6_425_499_648  # one bf16 copy of exp_avg_sq
    assert runs[1].parts.optimizer_state == 2 * step[1]["temporaries"]
