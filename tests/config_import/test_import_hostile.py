"""The ms-swift and torchtitan importers under hostile input (g5 review): every malformed script, TOML or
YAML/JSON value ends in ONE line naming the key (or the piece of script) and the valid values, exit code 2,
never a traceback; the same text pasted into ``POST /api/import`` is tests/web/test_api_import.py's 422.

Each case below raised a Python exception (TypeError, ValueError, ZeroDivisionError, IndexError, MemoryError)
before the fix it names, except where marked as a guard of behaviour that was already right.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError

runner = CliRunner()
SFT = "swift sft --model Qwen/Qwen2.5-7B-Instruct --max_length 2048 "
GRPO = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --max_length 512 "
TITAN_OLD = '[job]\ndump_folder = "x"\n[model]\nname = "llama3"\nflavor = "8B"\n'
TITAN_NEW = TITAN_OLD + "[parallelism]\ndata_parallel_shard_degree = 4\n"

#: (file name, text, words the one error line holds)
CASES = [
    # swift.py _step: the default gradient_accumulation_steps divided by a batch size that is not a whole number
    ("bs0.sh", SFT + "--per_device_train_batch_size 0\n", "micro_batch_size: must be from 1 to 1000000, got 0"),
    ("bsnan.sh", SFT + "--per_device_train_batch_size nan\n", "micro_batch_size: must be a whole number"),
    ("bslist.sh", SFT + "--per_device_train_batch_size 1 2\n", "micro_batch_size: must be an integer from 1"),
    ("bsuni.sh", SFT + "--per_device_train_batch_size ²\n", "micro_batch_size: must be an integer from 1"),
    # swift.py _gpus: args.json's global_world_size went through int() and a division
    ("w0.json", '{"model": "Qwen/Qwen2.5-7B", "max_length": 512, "tuner_type": "lora", "global_world_size": 0}',
     "global_world_size must be a whole number ≥ 1, got 0"),
    ("wx.json", '{"model": "Qwen/Qwen2.5-7B", "max_length": 512, "tuner_type": "lora", "global_world_size": "x"}',
     "global_world_size must be a whole number ≥ 1, got 'x'"),
    ("wnan.sh", SFT + "--global_world_size nan\n", "global_world_size must be a whole number ≥ 1, got nan"),
    # swift.py _step / _adapter / _eval / _rlhf / _fsdp: values of the wrong type
    ("attn.sh", SFT + "--attn_impl sdpa eager\n", "attn_impl '['sdpa', 'eager']' is not modelled yet (valid values: sdpa"),
    ("tm.yaml", "model: Qwen/Qwen2.5-7B\nmax_length: 512\ntuner_type: lora\ntarget_modules: 5\n",
     "target_modules must be module names or all-linear, got 5"),
    ("ratio.sh", SFT + "--split_dataset_ratio abc\n", "split_dataset_ratio must be a number from 0 to 1, got 'abc'"),
    ("ratio.json", '{"model": "Qwen/Qwen2.5-7B", "max_length": 512, "split_dataset_ratio": [1]}',
     "split_dataset_ratio must be a number from 0 to 1, got [1]"),
    ("done.sh", GRPO + "--max_completion_length abc\n", "max_completion_length must be a whole number ≥ 1, got 'abc'"),
    ("fsdp.sh", SFT + """--fsdp '{"fsdp": 5, "fsdp_config": 3}'\n""", "fsdp must name FSDP words"),
    # swift_shell.py: unicode digits, 64-bit arithmetic, expansion bombs, a swift command inside a value
    ("uni.sh", "N=$((²+1))\n" + SFT + "--per_device_train_batch_size $N\n", "cannot evaluate '²+1'"),
    ("bigint.sh", "N=$((" + "*".join(["9" * 4000] * 2) + "))\n" + SFT + "--lora_rank $N\n", "over 19 digits"),
    ("mul.sh", "N=$((" + "*".join(["999999999"] * 40) + "))\n" + SFT + "--lora_rank $N\n",
     "exceeds bash's 64-bit arithmetic"),
    ("double.sh", "V0=xxxxxxxxxx\n" + "".join(f'V{i}="$V{i - 1}$V{i - 1}"\n' for i in range(1, 40)) + SFT + "--a $V39\n",
     "expands to over 65,536 characters"),
    ("wide.sh", "V=" + "x" * 60_000 + "\n" + SFT + "--a " + "$V" * 100_000 + "\n", "expands to over 65,536 characters"),
    ("inval.sh", 'A="x swift sft"\n', "the swift command must start the line (after NAME=value settings), got ''"),
    ("long.sh", "swift sft " + "y" * 5000 + "\n", "'" + "y" * 40 + "...' after the swift subcommand"),
    # guards of what was already right: commands never run, the quote left open, an unknown train_type
    ("run.sh", SFT + "--output_dir $(rm -rf /)\n", "runs a command inside the line ($(rm); vramfit does not run"),
    ("tick.sh", SFT + "--output_dir `touch /tmp/x`\n", "vramfit does not run scripts"),
    ("quote.sh", 'swift sft --model "Qwen/Qwen2.5-7B --max_length 2048\n', "No closing quotation"),
    ("tt.sh", SFT + "--train_type longlora\n", "train_type 'longlora' is not modelled yet (valid values: lora, full)"),
    ("empty.sh", "", "holds no 'swift sft', 'swift rlhf' or 'swift pt' command"),
    # torchtitan.py _batch / _model: strings and zeros where TOML should give whole numbers
    ("gbs.toml", TITAN_NEW + '[training]\nlocal_batch_size = 2\nglobal_batch_size = "x"\n',
     "training.global_batch_size must be a whole number"),
    ("lbs0.toml", TITAN_NEW + "[training]\nlocal_batch_size = 0\nglobal_batch_size = 8\n",
     "training.local_batch_size must be a whole number ≥ 1, got 0"),
    ("lbs.toml", TITAN_NEW + '[training]\nlocal_batch_size = "a"\n', "training.local_batch_size must be a whole number"),
    ("pp.toml", TITAN_OLD + '[training]\nlocal_batch_size = 4\n[parallelism]\npipeline_parallel_degree = 2\n'
     'pipeline_parallel_microbatch_size = "x"\n', "parallelism.pipeline_parallel_microbatch_size must be a whole"),
    ("ppold.toml", TITAN_OLD + '[training]\nbatch_size = 4\n[experimental]\npipeline_parallel_degree = 2\n'
     'pipeline_parallel_microbatches = "x"\n', "experimental.pipeline_parallel_microbatches must be a whole"),
    ("conv.toml", TITAN_OLD.replace('"8B"\n', '"8B"\nconverters = 5\n') + "[training]\nbatch_size = 1\n",
     "model.converters must be a list of converter names"),
    ("dp0.toml", TITAN_OLD + "[training]\nbatch_size = 1\ndata_parallel_shard_degree = 0\n",
     "training.data_parallel_shard_degree must be a whole number ≥ 1 or -1, got 0"),
    ("bad.toml", "[training\nbatch_size = 1\n", "is not valid TOML"),
    # loader.py: the YAML anchor refusal was wrapped in a second "from: <file>:" (ScenarioError is a ValueError)
    ("bomb.yaml", 'a: &a ["lol","lol"]\nb: [*a,*a]\nmodel: x\n', "YAML anchors and aliases"),
]


@pytest.mark.parametrize(("name", "text", "words"), CASES, ids=[c[0] for c in CASES])
def test_hostile_config_is_one_line_exit_2(tmp_path, name, text, words):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["estimate", "--from", str(p)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exception, r.output[-800:])
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: from: {p}: ") and err.count("from: ") == 1, err
    assert words in err and len(err) < 400 + len(str(p)), err


PASTED = [c for c in CASES if c[0].endswith((".sh", ".toml")) and c[0] not in ("empty.sh", "bad.toml")]


@pytest.mark.parametrize(("name", "text", "words"), PASTED, ids=[c[0] for c in PASTED])
def test_hostile_paste_is_one_scenario_error(name, text, words):
    """Pasted (the web's path: no suffix, the kind guessed from the text), the same one error."""
    dialect = "torchtitan" if name.endswith(".toml") else "swift"
    with pytest.raises(ScenarioError) as exc:
        from_text(text, dialect=dialect)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_torchtitan_global_batch_size_minus_one_is_read_not_unknown():
    """v0.2.2's train_configs write ``global_batch_size = -1`` (local_batch_size x the data-parallel degree): read,
    no gradient accumulation; the type check must not leave it to the 'not read by vramfit' catch-all."""
    imp = from_text(TITAN_NEW + "[training]\nlocal_batch_size = 2\nglobal_batch_size = -1\n", dialect="torchtitan")
    entry = next(e for e in imp.entries if e.key == "training.global_batch_size")
    assert (entry.kind, imp.overrides["grad_accum"], imp.overrides["micro_batch_size"]) == ("read", 1, 2)
    imp = from_text(TITAN_NEW + "[training]\nlocal_batch_size = 2\nglobal_batch_size = 32\n", dialect="torchtitan")
    assert imp.overrides["grad_accum"] == 4  # 32 / (2 x 4 shards)


def test_a_script_naming_a_config_file_whose_env_is_not_a_mapping(tmp_path):
    """``swift sft cfg.yaml`` merges the file's ENV under the script's (TypeError on ``ENV: 5`` before the review)."""
    (tmp_path / "cfg.yaml").write_text("ENV: 5\nmodel: Qwen/Qwen2.5-7B\nmax_length: 512\n")
    (tmp_path / "run.sh").write_text("swift sft cfg.yaml\n")
    r = runner.invoke(app, ["estimate", "--from", str(tmp_path / "run.sh")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.exception
    assert r.stderr.strip().endswith("the config file's ENV must be a mapping of environment variables, got 5")
