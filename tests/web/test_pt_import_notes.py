"""The config-import report reads in Portuguese on the PT page: every note the importers give (why a key is ignored or
not modelled yet, where a default comes from) for the bundled fixtures, their companion files, the configs written in
the config-import tests and a few more that reach other code paths, and every reason in the importers' key tables, is
translated by vramfit.web.translate (translate_import.py), or is a pure citation, which stays as it is."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from vramfit.config_import import from_config, from_text
from vramfit.errors import VramfitError

TESTS = Path(__file__).resolve().parents[1] / "config_import"
FIX = TESTS / "fixtures"
COMPANIONS = [("trl_full.json", "adapter_config.json", "bnb_config.json"), ("trl_sft_qlora.yaml", "accelerate_fsdp.yaml"),
              ("trl_full.json", "ds_z3_offload.json"), ("trl_full.json", "ds_z2.json")]
DIALECTS = ("axolotl", "companions", "hf_common", "litgpt", "llamafactory", "stages", "swift_keys", "torchtitan",
            "torchtune", "trl")

AX = "base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 1\n"
TRL = "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 1\n"
LF = "model_name_or_path: Qwen/Qwen2.5-7B\ndo_train: true\nfinetuning_type: lora\n"
TT = ("model:\n  _component_: torchtune.models.llama3_2.llama3_2_3b\nbatch_size: 2\ngradient_accumulation_steps: 1\n"
      "dtype: bf16\n")
TITAN = "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nseq_len = 2048\n"
#: Configs that reach notes the fixtures and the config-import tests' own configs do not (one per code path).
EXTRA = [
    (AX + "adapter: lora\nload_in_4bit: true\nlora_r: 8\nlora_target_linear: true\ntorch_compile: auto\neval_batch_size: 0\n"
     "unsloth_lora_mlp: true\nxformers_attention: true\nlora_modules_to_save: [lm_head]\n", "axolotl"),
    (AX.replace("batch_size: 1", "batch_size: 8") + "adapter: lora\nlora_r: 8\nlora_target_modules: '.*proj'\n"
     "quantize_moe_experts: true\nnum_epochs: 1\nsequence_len: 4096\nrl: grpo\nrl_beta: 0.04\n"
     "trl:\n  use_vllm: true\n  vllm_gpu_memory_utilization: 0.4\n", "axolotl"),
    (AX + "rl: ebft\n", "axolotl"),
    (TRL + "max_length: null\neval_strategy: steps\ndo_predict: false\nuse_peft: false\nlora_r: 8\nload_in_4bit: false\n"
     "bnb_4bit_quant_type: nf4\nactivation_checkpointing: true\ngradient_checkpointing: true\n"
     "activation_checkpointing_kwargs: {every_n_layers: 2}\n", "trl"),
    (TRL + "max_seq_length: null\npacking: true\n", "trl"),
    (TRL + "max_seq_length: null\n", "trl"),
    (TRL.replace("batch_size: 1", "batch_size: 8") + "stage: grpo\nuse_peft: true\nload_in_4bit: true\n"
     "bnb_4bit_quant_storage: bfloat16\nmax_completion_length: 64\n", "trl"),
    (TRL + "stage: dpo\nloss_type: [ipo]\nmax_length: 1024\nmax_prompt_length: 512\n", "trl"),
    (LF + "stage: ppo\nuse_unsloth_gc: true\ntrust_remote_code: true\n", "llamafactory"),
    (LF + "stage: rm\n", "llamafactory"),
    (LF + "stage: dpo\npref_loss: simpo\npref_ftx: 0.5\n", "llamafactory"),
    (TT.replace("llama3_2.llama3_2_3b", "llama4.llama4_scout_17b_16e"), "torchtune"),
    (TT + "run_val_every_n_steps: 10\ndataset_val: {_component_: torchtune.datasets.alpaca_dataset}\n", "torchtune"),
    ("[model]\nhf_assets_path = 'meta-llama/Llama-3.1-8B'\n[training]\nseq_len = 2048\n", "torchtitan"),
    (TITAN + "enable_cpu_offload = true\n[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n"
     "enable_sequence_parallel = false\n[activation_checkpoint]\nmode = 'selective'\nselective_ac_option = '2'\n",
     "torchtitan"),
    ("swift: sft\nmodel: Qwen/Qwen2.5-7B\ndataset: x\nsequence_parallel_size: 2\noptimizer: galore\n", "swift"),
    ("swift: rlhf\nrlhf_type: grpo\nmodel: Qwen/Qwen2.5-7B\ndataset: x\nreward_funcs: [accuracy]\n"
     "per_device_train_batch_size: 8\n", "swift"),
    ("swift: rlhf\nrlhf_type: gkd\nmodel: Qwen/Qwen2.5-7B\ndataset: x\n", "swift"),
    ("checkpoint_dir: checkpoints/mistralai/Mistral-7B-v0.1\nprecision: bf16-true\ndevices: 2\n"
     "train:\n  micro_batch_size: 2\neval:\n  interval: 100\n  final_validation: true\n", "litgpt"),
]

#: A citation: ``owner/repo@sha`` or ``project version`` (``ms-swift v4.5.2``, ``pytorch/torchtitan v0.2.2``).
CITATION_HEAD = re.compile(r"([\w.-]+/[\w.-]+@[0-9a-f]{7,40}|[\w.-]+(?:/[\w.-]+)? v?\d+(?:\.\d+)+(?: \([0-9a-f]{7,40}\))?)"
                           r"(?= |$)")
#: What may follow it: a path or code name (with / _ . * or a digit), a --flag, "l." (line), a CamelCase or upper-case
#: name, True/False/None, a quoted value, an operator; and a last "(model_type)" or "(model_type: names)".
CODE = re.compile(r"l\.|[^\s]*[/_.*\d][^\s]*|--[\w-]+|[A-Z][a-z0-9]*[A-Z]\w*|[A-Z0-9_]+|True|False|None|'[^']*'|[*/=<>+]")
MODEL_TYPE = re.compile(r" \([a-z0-9_]+(?:: [\w, ]+)?\)$")


def is_citation(note: str) -> bool:
    """Only citations ("; " between them), with no English prose after them (which would need translating)."""
    for part in note.split("; "):
        head = CITATION_HEAD.match(part)
        if not head:
            return False
        rest = MODEL_TYPE.sub("", part[head.end():])
        if not all(CODE.fullmatch(t) for t in re.split(r"[\s,():]+", rest) if t):
            return False
    return True


def _notes(imp) -> set[str]:
    return {e.note for e in imp.entries if e.note}


def _fixture_notes() -> set[str]:
    """The fixtures pasted (the companions and the configs that name a file refuse: skipped), read from their files
    (the DeepSpeed file a config names is read with it) and with their companions."""
    out: set[str] = set()
    for path in sorted(FIX.iterdir()):
        try:
            out |= _notes(from_text(path.read_text()))
        except VramfitError:
            continue
        out |= _notes(from_config(path))
    for main, *companions in COMPANIONS:
        out |= _notes(from_config(FIX / main, *(FIX / c for c in companions)))
    return out


def _inline_notes() -> set[str]:
    """The configs written in tests/config_import/*.py (their multi-line strings, pasted; those that are not a whole
    config are skipped) and :data:`EXTRA`."""
    out: set[str] = set()
    texts = {node.value for f in sorted(TESTS.glob("*.py")) for node in ast.walk(ast.parse(f.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value}
    for text in sorted(texts):
        try:
            out |= _notes(from_text(text))
        except (VramfitError, ValueError):
            continue
    for text, dialect in EXTRA:
        out |= _notes(from_text(text, dialect=dialect))
    return out


def _table_notes() -> set[str]:
    """Every reason in the importers' tables (IGNORED lists, NOT_MODELLED maps), whether a test reaches it or not."""
    out: set[str] = set()
    for name in DIALECTS:
        module = importlib.import_module(f"vramfit.config_import.{name}")
        for key, value in vars(module).items():
            if key.endswith("IGNORED") and isinstance(value, list):
                out |= {why for _, why in value}
            elif key == "NOT_MODELLED" and isinstance(value, dict):
                out |= set(value.values())
    return out


def test_every_import_note_has_portuguese():
    from vramfit.web.translate import untranslated

    read = _fixture_notes() | _inline_notes()
    notes = sorted(read | _table_notes())
    assert len(read) >= 150 and len(notes) >= 300, (len(read), len(notes))
    assert [n for n in untranslated(notes) if not is_citation(n)] == []


def test_extra_configs_import():
    """Each of EXTRA still imports (a config that starts to fail would silently stop covering its notes)."""
    for text, dialect in EXTRA:
        assert _notes(from_text(text, dialect=dialect)), text


def test_the_citation_pattern_is_narrow():
    assert is_citation("ms-swift v4.5.2 swift/arguments/tuner_args.py l. 123")
    assert is_citation("pytorch/torchtitan@9dec370 torchtitan/config_manager.py --training.seq_len")
    assert is_citation("transformers 5.24.0 src/transformers/training_args.py l. 1106, 1128: eval_strategy 'no', "
                       "per_device_eval_batch_size 8")
    assert is_citation("hiyouga/LLaMA-Factory@ff6d4d1 src/llamafactory/hparams/model_args.py; "
                       "hiyouga/LLaMA-Factory@06d78ff src/llamafactory/model/model_utils/checkpointing.py "
                       "prepare_model_for_training")
    assert is_citation("peft 0.21.2 src/peft/utils/constants.py (llama: q_proj, v_proj)")
    for prose in ("ms-swift v4.5.2 swift/trainers/arguments.py: the HF Trainer's (transformers < 5)",
                  "Lightning-AI/litgpt@2685705 litgpt/finetune/full.py (setup defaults)",
                  "pytorch/torchtitan@9dec370 torchtitan/config_manager.py l. 521: every second block",
                  "pytorch/torchtitan@9dec370 run_llama_train.sh l. 13: NGPU defaults to 8 (set NGPU / pass --num-gpus)",
                  "ms-swift v4.5.2 swift/cli/main.py: no NNODES, one node", "checkpoint saving", "torch 2.5.1 and newer"):
        assert not is_citation(prose), prose


def test_representative_notes_read_as_expected():
    from vramfit.web.translate import to_pt

    expected = {
        "logging": "registos",
        "checkpoint saving": "gravação de checkpoints",
        "optimizer hyperparameters": "hiperparâmetros do otimizador",
        "schedule: no memory effect": "calendário do treino: sem efeito na memória",
        "DeepSpeed default: none": "predefinição do DeepSpeed: nenhum",
        "False: the default": "False: a predefinição",
        "not in the file: the GPU count is set at launch; pass --num-gpus":
            "não está no ficheiro: o número de GPUs define-se no lançamento; indica --num-gpus",
        "ms-swift v4.5.2 swift/arguments/tuner_args.py l. 123": "ms-swift v4.5.2 swift/arguments/tuner_args.py l. 123",
        "pytorch/torchtune@bd2a0fc recipes/lora_finetune_distributed.py l. 395: batch_size_val defaults to batch_size":
            "pytorch/torchtune@bd2a0fc recipes/lora_finetune_distributed.py l. 395: batch_size_val é batch_size por "
            "predefinição",
        "Lightning-AI/litgpt@2685705 litgpt/finetune/lora.py (setup defaults)":
            "Lightning-AI/litgpt@2685705 litgpt/finetune/lora.py (predefinições de setup)",
        "rlhf_type 'gkd' is not modelled yet (modelled: dpo, orpo): estimated as supervised fine-tuning":
            "rlhf_type 'gkd' ainda não é modelado (modelados: dpo, orpo): estimado como ajuste fino supervisionado",
        "DoRA/rsLoRA/modules_to_save/regex or parameter targets: counted as plain LoRA":
            "DoRA/rsLoRA/modules_to_save/alvos por regex ou por parâmetro: contam como LoRA simples",
        "every 2-th block checkpointed: counted as no checkpointing (an upper bound)":
            "checkpointing de um bloco em cada 2: contado como sem checkpointing (um limite superior)",
        "-1: 4 = the launcher's 8 GPUs / 2 for the other degrees; write the degree for another count (--num-gpus does "
        "not re-derive it)": "-1: 4 = as 8 GPUs do lançador / 2 para os outros graus; escreve o grau para outro número "
        "de GPUs (--num-gpus não o recalcula)",
    }
    assert {note: to_pt(note) for note in expected} == expected


def test_labels_leave_sentences_led_by_a_key_alone():
    """A one-word label (loss, generation, data) is matched whole: an error led by that key keeps its key."""
    from vramfit.web.translate import to_pt

    assert to_pt("loss: unknown value 'x' (valid values: standard, fused)").startswith("loss: valor desconhecido")
    assert to_pt("generation: vllm-server runs vLLM on GPUs of its own beside the training ones: max_gpus 1 leaves none "
                 "for it; raise max_gpus or colocate").startswith("generation: o vllm-server corre")
    assert to_pt("data") == "dados" and to_pt("data: x") == "data: x"
