"""Fine-tune a causal LM with TRL (SFTTrainer, or the trainer of the plan's stage); written by ``vramfit plan --export``.

Run (the command vramfit printed):
    accelerate launch --config_file accelerate.yaml train.py --config train_config.yaml --dataset_path data.jsonl

``train_config.yaml`` holds TRL's own argument classes, flat (``trl.ModelConfig`` fields such as
``model_name_or_path``, ``dtype``, ``use_peft``, ``lora_r``, ``load_in_4bit``, and ``trl.SFTConfig`` fields such
as ``per_device_train_batch_size``); any of them can be overridden on the command line, e.g. ``--max_steps 10``.
The dataset is a local JSON/JSONL/CSV/Parquet file (or a folder ``datasets.load_from_disk`` reads) with a
``text`` column or a ``messages`` column; for ``stage: dpo/orpo/simpo`` ``prompt``, ``chosen`` and ``rejected``
columns, for ``kto`` ``prompt``, ``completion`` and ``label``, for ``grpo`` a ``prompt`` column (the completions
are scored by ``--reward_model``). ``stage`` in ``train_config.yaml`` picks the trainer and its config class.
"""

import argparse
import gc
import importlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import load_dataset, load_from_disk
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import ModelConfig, TrlParser

#: stage -> (module, config class, trainer class) in TRL 1.16
STAGES = {
    "sft": ("trl", "SFTConfig", "SFTTrainer"),
    "dpo": ("trl", "DPOConfig", "DPOTrainer"),
    "kto": ("trl", "KTOConfig", "KTOTrainer"),
    "orpo": ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
    "simpo": ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
    "grpo": ("trl", "GRPOConfig", "GRPOTrainer"),
}


@dataclass
class DataArguments:
    dataset_path: str = field(metadata={"help": "Training data: a .json/.jsonl/.csv/.parquet file or a saved dataset folder."})
    stage: str = field(default="sft", metadata={"help": f"Training stage, picks the trainer: {', '.join(STAGES)}."})
    reward_model: str | None = field(default=None, metadata={"help": "grpo: the reward model (path or id) that scores completions."})


def stage_of(argv) -> str:
    """The stage, read before the parser is built (its config class depends on it): --stage, else the --config file's."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--stage")
    known, _ = pre.parse_known_args(argv)
    if known.stage:
        return known.stage
    if known.config:
        import yaml

        with open(known.config, encoding="utf-8") as f:
            return (yaml.safe_load(f) or {}).get("stage", "sft")
    return "sft"


def trainer_classes(stage: str):
    if stage not in STAGES:
        raise SystemExit(f"stage: {stage!r} is not one of {', '.join(STAGES)}")
    module, config, trainer = STAGES[stage]
    mod = importlib.import_module(module)
    return getattr(mod, config), getattr(mod, trainer)


def load_data(path: str):
    p = Path(path)
    if p.is_dir():
        return load_from_disk(str(p))
    kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}[p.suffix]
    return load_dataset(kind, data_files=str(p), split="train")


def compute_dtype(args) -> torch.dtype:
    return torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32


def load_model(model_args: ModelConfig, args):
    quantization_config = None
    if model_args.load_in_4bit:
        storage = model_args.bnb_4bit_quant_storage
        quantization_config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=model_args.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=model_args.use_bnb_nested_quant,
            bnb_4bit_compute_dtype=compute_dtype(args),
            bnb_4bit_quant_storage=getattr(torch, storage) if storage else torch.uint8,
        )
    elif model_args.load_in_8bit:
        quantization_config = BitsAndBytesConfig(load_in_8bit=True)
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        dtype=model_args.dtype,
        attn_implementation=model_args.attn_implementation,
        quantization_config=quantization_config,
    )


def lora_config(model_args: ModelConfig) -> LoraConfig | None:
    if not model_args.use_peft:
        return None
    return LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=model_args.lora_target_modules,
        task_type=model_args.lora_task_type,
        use_dora=model_args.use_dora,
        modules_to_save=model_args.lora_modules_to_save,
    )


def main(argv=None) -> None:
    import sys

    stage = stage_of(sys.argv[1:] if argv is None else argv)
    config_class, trainer_class = trainer_classes(stage)
    parser = TrlParser((DataArguments, config_class, ModelConfig))
    data_args, training_args, model_args = parser.parse_args_and_config(argv)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(model_args, training_args)
    print(f"rank {training_args.process_index} of {training_args.world_size}: loaded {model_args.model_name_or_path},"
          f" {model.get_memory_footprint() / 2**20:,.1f} MiB of weights, 4-bit: {getattr(model, 'is_loaded_in_4bit', False)}")
    extra = {}
    if stage == "grpo":
        if not data_args.reward_model:
            raise SystemExit("reward_model: grpo scores its completions with a reward model; pass --reward_model")
        extra["reward_funcs"] = data_args.reward_model
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=load_data(data_args.dataset_path),
        processing_class=tokenizer,
        peft_config=lora_config(model_args),
        **extra,
    )
    print(f"trainer: {type(trainer).__name__}")
    trainer.train()
    trainer.save_model(training_args.output_dir)
    # Tear down in order: first the wrapped model (DDP/FSDP/DeepSpeed engine: accelerate 1.16 Accelerator.free_memory
    # drops the accelerator's references, deleting the trainer drops its model_wrapped), while the process group is
    # still alive, then the group itself on every rank (Accelerator.end_training -> PartialState.destroy_process_group).
    # Destroyed the other way round, the DDP reducer is only released at interpreter exit, after its group: on two
    # Gloo ranks (torch 2.13, CPU) a finished run then aborted a rank with 'terminate called without an active
    # exception' in 13 of 50 launches of a one-step DDP script under load, and in 0 of 50 with this order.
    accelerator = trainer.accelerator
    accelerator.free_memory()
    del trainer, model
    gc.collect()
    accelerator.end_training()


if __name__ == "__main__":
    main()
