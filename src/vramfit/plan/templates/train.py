"""Fine-tune a causal LM with TRL's SFTTrainer; written by ``vramfit plan --export``.

Run (the command vramfit printed):
    accelerate launch --config_file accelerate.yaml train.py --config train_config.yaml --dataset_path data.jsonl

``train_config.yaml`` holds TRL's own argument classes, flat (``trl.ModelConfig`` fields such as
``model_name_or_path``, ``dtype``, ``use_peft``, ``lora_r``, ``load_in_4bit``, and ``trl.SFTConfig`` fields such
as ``per_device_train_batch_size``); any of them can be overridden on the command line, e.g. ``--max_steps 10``.
The dataset is a local JSON/JSONL/CSV/Parquet file (or a folder ``datasets.load_from_disk`` reads) with a
``text`` column or a ``messages`` column.
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import load_dataset, load_from_disk
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser


@dataclass
class DataArguments:
    dataset_path: str = field(metadata={"help": "Training data: a .json/.jsonl/.csv/.parquet file or a saved dataset folder."})


def load_data(path: str):
    p = Path(path)
    if p.is_dir():
        return load_from_disk(str(p))
    kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}[p.suffix]
    return load_dataset(kind, data_files=str(p), split="train")


def compute_dtype(args: SFTConfig) -> torch.dtype:
    return torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32


def load_model(model_args: ModelConfig, args: SFTConfig):
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
    )


def main(argv=None) -> None:
    parser = TrlParser((DataArguments, SFTConfig, ModelConfig))
    data_args, training_args, model_args = parser.parse_args_and_config(argv)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(model_args, training_args)
    print(f"rank {training_args.process_index} of {training_args.world_size}: loaded {model_args.model_name_or_path},"
          f" {model.get_memory_footprint() / 2**20:,.1f} MiB of weights, 4-bit: {getattr(model, 'is_loaded_in_4bit', False)}")
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=load_data(data_args.dataset_path),
        processing_class=tokenizer,
        peft_config=lora_config(model_args),
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    main()
