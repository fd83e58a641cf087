"""Property-based fuzzing of the ms-swift script and torchtitan TOML importers (g5 review): generated scripts and
job configs whose keys are the ones the importers read, with nasty values, end in exit code 0 or 2 and one line,
never a traceback: the import report may precede the one error line (as for every dialect)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz_cli import FUZZ, JSON_LEAF, NASTY, VALUE, runner

from vramfit.cli.main import app

SWIFT_KEYS = ["tuner_type", "train_type", "per_device_train_batch_size", "gradient_accumulation_steps",
              "max_length", "lora_rank", "lora_alpha", "lora_dropout", "target_modules", "quant_bits", "quant_method",
              "bnb_4bit_quant_type", "torch_dtype", "bf16", "fp16", "attn_impl", "optim", "deepspeed", "fsdp",
              "fsdp_config", "split_dataset_ratio", "eval_strategy", "per_device_eval_batch_size", "rlhf_type",
              "max_completion_length", "num_generations", "use_vllm", "vllm_mode", "global_world_size", "freeze_vit",
              "use_liger_kernel", "gradient_checkpointing", "beta", "packing"]
def check(result) -> None:
    assert result.exit_code in (0, 2), (result.exit_code, result.output[-2000:], result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and len(errors[0]) < 1500, result.stderr[-2000:]
        assert result.stderr.rstrip().endswith(errors[0]), result.stderr[-2000:]


PIECES = st.sampled_from(["$((2*3))", "$(expr 4 + 4)", "$((1/0))", "$((²+1))", "$(nproc)", "`id`", "${N}",
                          '"', "'", "\\", "{", '{"fsdp": 5}', "[1]", "-1", "0", "nan", "٣", "zero3", "fsdp2"])
SIMPLE = st.sampled_from(["0", "1", "2", "-1", "nan", "inf", "1e400", "x", "²", "lora", "full", "bnb", "4", "grpo",
                          "true", "false", "sdpa", "colocate", "0.5", "9" * 30])
WORD = st.one_of(SIMPLE, SIMPLE, SIMPLE, PIECES, NASTY, VALUE).map(lambda v: v.replace("\n", " ")[:200])


@settings(FUZZ, max_examples=80)
@given(st.lists(st.tuples(st.sampled_from(SWIFT_KEYS), st.lists(WORD, max_size=2)), min_size=1, max_size=3,
                unique_by=lambda kv: kv[0]),
       st.sampled_from(["sft", "rlhf", "sft", "sft", "pt", "infer"]), st.lists(WORD, max_size=2), st.integers(0, 5))
def test_swift_scripts(scratch, args, sub, env, model):
    lines = [f"N={env[0]}" if env else "N=1"]
    words = [f"--{k} {' '.join(v)}" for k, v in args]
    head = f"NPROC_PER_NODE={env[-1] if env else 2} swift {sub}"
    model_arg = "--model Qwen/Qwen2.5-7B-Instruct --max_length 512" if model else ""  # mostly on: past the model
    p = scratch / "run.sh"
    p.write_text("\n".join([*lines, " \\\n    ".join([head, model_arg, *words])]) + "\n", encoding="utf-8")
    check(runner.invoke(app, ["estimate", "--from", str(p)]))


TITAN = {"training": ["batch_size", "local_batch_size", "global_batch_size", "seq_len", "data_parallel_shard_degree",
                      "tensor_parallel_degree", "mixed_precision_param", "compile", "enable_cpu_offload", "dtype"],
         "parallelism": ["data_parallel_shard_degree", "data_parallel_replicate_degree", "tensor_parallel_degree",
                         "pipeline_parallel_degree", "pipeline_parallel_microbatch_size", "context_parallel_degree",
                         "expert_parallel_degree", "fsdp_reshard_after_forward", "pipeline_parallel_schedule"],
         "experimental": ["pipeline_parallel_degree", "pipeline_parallel_microbatches", "context_parallel_degree"],
         "model": ["name", "flavor", "converters", "hf_assets_path"],
         "activation_checkpoint": ["mode", "selective_ac_option"], "optimizer": ["name", "early_step_in_backward"],
         "compile": ["enable"]}
TOML_SIMPLE = st.sampled_from(['"x"', "0", "1", "2", "4", "-1", "nan", "[1]", "true", "1.5", '"8"'])
TOML_VALUE = st.one_of(TOML_SIMPLE, TOML_SIMPLE, JSON_LEAF.filter(lambda v: v is not None).map(lambda v: json.dumps(v, allow_nan=True)),
                       st.sampled_from(["nan", "inf", "-1", "0", "9223372036854775807", "[1, 2]", '["float8"]', "{a=1}",
                                        '"8B"', '"llama3"', '"selective"', '"op"', "true", "1.5"]))


@settings(FUZZ, max_examples=30)
@given(st.lists(st.sampled_from(sorted(TITAN)), min_size=1, max_size=5, unique=True), st.data())
def test_torchtitan_tomls(scratch, tables, data):
    text = ['[job]\ndump_folder = "x"']
    for table in dict.fromkeys(["training", *tables]):
        keys = data.draw(st.lists(st.sampled_from(TITAN[table]), max_size=4, unique=True))
        text.append(f"[{table}]\n" + "".join(f"{k} = {data.draw(TOML_VALUE)}\n" for k in keys))
    p = scratch / "job.toml"
    p.write_text("\n".join(text), encoding="utf-8")
    check(runner.invoke(app, ["estimate", "--from", str(p)]))
