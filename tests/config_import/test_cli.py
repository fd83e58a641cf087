"""`--from`, `--dialect` and `--write-to` as a user runs them."""

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from vramfit import estimate, from_config
from vramfit.cli.main import app

FIX = Path(__file__).parent / "fixtures"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_estimate_from_matches_the_imported_scenario_and_reports_keys():
    r = run("estimate", "--from", FIX / "axolotl_qlora.yml", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["peak"]["device_bytes"] == estimate(from_config(FIX / "axolotl_qlora.yml").scenario).peak.device_bytes
    assert "read     sequence_len: 4096 → seq_len=4096" in r.stderr
    assert "ignored  wandb_project (logging)" in r.stderr


def test_flags_override_the_file():
    r = run("estimate", "--from", FIX / "axolotl_qlora.yml", "--seq-len", "1024", "--method", "lora", "--json")
    assert r.exit_code == 0, r.output
    sc = json.loads(r.stdout)["scenario"]
    assert (sc["seq_len"], sc["method"], sc["quantize"], sc["micro_batch_size"]) == (1024, "lora", "none", 2)


def test_companion_files_and_dialect_on_sweep():
    r = run("sweep", "--from", FIX / "trl_full.json", "--from", FIX / "adapter_config.json", "--dialect", "trl",
            "--vary", "micro_batch_size=1,2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scenario"]["lora_rank"] == 64


def test_bad_files_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("base_model: x\nbase_model: y\n")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)))
    notyaml = tmp_path / "notes.yaml"
    notyaml.write_text("key: [unclosed\n")
    nods = tmp_path / "a.yml"
    nods.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: 1\ndeepspeed: nope/zero3.json\n")
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    cases = [("--from", bad), ("--from", notyaml), ("--from", nods), ("--from", big), ("--from", FIX / "axolotl_qlora.yml", "--dialect", "litgpt"),
             ("--from", FIX / "ds_z3_offload.json"), ("--from", tmp_path / "missing.yaml"), ("--dialect", "trl"), ("--from", bomb)]
    for case in cases:
        r = run("estimate", *case)
        assert r.exit_code == 2, (case, r.output)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, r.stderr)


def test_fit_write_to_writes_the_change_that_fits(tmp_path):
    src = tmp_path / "qlora.yml"
    shutil.copy(FIX / "axolotl_qlora.yml", src)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = run("fit", "--from", src, "--gpu", "rtx3060-12gb")
    assert r.exit_code == 0 and sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written unless asked
    out = tmp_path / "fits.yml"
    r = run("fit", "--from", src, "--gpu", "rtx3060-12gb", "--write-to", out)
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.stderr.replace("\n", "")
    new = from_config(out).scenario
    assert not from_config(src).scenario == new
    from vramfit.plan import fit

    assert fit(new.replace(gpu="rtx3060-12gb"), "rtx3060-12gb").fits
    changed = [(a, b) for a, b in zip(src.read_text().splitlines(), out.read_text().splitlines(), strict=True) if a != b]
    assert len(changed) >= 1 and all(a.split(":")[0] == b.split(":")[0] for a, b in changed)


def test_plan_write_to_writes_the_picked_plan(tmp_path):
    src = tmp_path / "qlora.yml"
    shutil.copy(FIX / "axolotl_qlora.yml", src)
    out = tmp_path / "plan.yml"
    # a 48 GB card: its pick (8 x 1) differs from the config's 2 x 4; on a 24 GB card the config's own
    # setting is the pick, and nothing is written
    r = run("plan", "--from", src, "--cards", "l40s", "--max-gpus", "1", "--write-to", out, "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plans"][0]
    sc = from_config(out).scenario
    assert (sc.micro_batch_size, sc.grad_accum) == (plan["micro_batch_size"], plan["grad_accum"])
    assert "-micro_batch_size: 2" in r.stderr


def test_write_to_needs_from(tmp_path):
    r = run("fit", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "rtx3060-12gb", "--write-to", tmp_path / "x.yml")
    assert r.exit_code == 2 and "needs --from" in r.stderr
    assert not (tmp_path / "x.yml").exists()


def test_flags_are_written_back_typed(tmp_path):
    src = tmp_path / "q.yaml"
    shutil.copy(FIX / "litgpt_qlora.yaml", src)
    r = run("fit", "--from", src, "--gpu", "h100-sxm", "--micro-batch-size", "4", "--write-to", tmp_path / "o.yaml")
    assert r.exit_code == 0, r.output
    text = (tmp_path / "o.yaml").read_text()
    assert "  micro_batch_size: 4\n" in text and "  global_batch_size: 64\n" in text  # 4 x 16 accumulation x 1 GPU
    r = run("fit", "--from", src, "--gpu", "h100-sxm", "--write-to", tmp_path / "n.yaml")
    assert "nothing to change" in r.stderr and not (tmp_path / "n.yaml").exists()


AXOLOTL_LONG = """base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
sequence_len: 4096
micro_batch_size: 4
gradient_accumulation_steps: 1
gradient_checkpointing: false
bf16: true
optimizer: adamw_torch
"""


def test_fit_write_to_keeps_the_training_where_a_combination_fits(tmp_path):
    """Only 128-token rows fitted alone, and fit --write-to saved sequence_len: 128 (3 % of the 4,096) where
    checkpointing and a smaller micro-batch fit together. The ranking now holds the combination (fused loss first,
    which an Axolotl file cannot say), and the file gets the best combination of what it can hold."""
    from vramfit.plan import changes_to_fit

    src = tmp_path / "ax.yml"
    src.write_text(AXOLOTL_LONG)
    sc = from_config(src).scenario.replace(gpu="rtx4090")
    ranked = [c for c in changes_to_fit(sc, "rtx4090") if c.fits]
    assert ranked[0].name == "combined" and ranked[0].kind == "slower" and "seq_len" not in ranked[0].changes
    narrow = [c.name for c in changes_to_fit(sc, "rtx4090", only_keys={"seq_len"})]
    assert narrow == ["shorter-sequence"]  # not the same change again as a 'combined'
    r = run("fit", "--from", src, "--gpu", "rtx4090", "--write-to", src)
    assert r.exit_code == 0, r.output
    new = from_config(src).scenario
    assert new.seq_len >= 2048 and new.gradient_checkpointing.value == "full" and new.micro_batch_size == 1
    from vramfit.plan import fit

    assert fit(new.replace(gpu="rtx4090"), "rtx4090").fits


def test_write_to_writes_nothing_a_companion_or_the_card_would_refuse(tmp_path):
    """plan --write-to a new micro-batch where the DeepSpeed JSON beside the config pins the old one (the Trainer refuses
    the mismatch, and vramfit rewrites only the config); fit --write-to where no change the file can hold fits (it
    used to write an unchanged copy): one line each, exit 2, no file."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
                                                  "zero_optimization": {"stage": 2}}))
    src = tmp_path / "sft.yaml"
    src.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nuse_peft: true\nper_device_train_batch_size: 4\n"
                   "gradient_accumulation_steps: 4\nmax_length: 4096\nbf16: true\ndeepspeed: ds.json\n")
    r = run("plan", "--from", src, "--effective-batch", "16", "--dataset-tokens", "5M", "--cards", "rtx4090",
            "--write-to", tmp_path / "new.yaml")
    assert r.exit_code == 2 and not (tmp_path / "new.yaml").exists()
    assert "would contradict the DeepSpeed config: deepspeed → train_micro_batch_size_per_gpu: 4 contradicts" in r.output
    tt = tmp_path / "tt.yaml"  # torchtune's single-device full fine-tuning of Llama-3.1-8B: no offload key to write
    tt.write_text("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ntokenizer:\n  max_seq_len: 4096\n"
                  "batch_size: 2\ngradient_accumulation_steps: 8\noptimizer:\n  _component_: torch.optim.AdamW\n"
                  "  fused: True\nloss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n"
                  "enable_activation_checkpointing: True\ndtype: bf16\n")
    r = run("fit", "--from", tt, "--gpu", "l40s", "--write-to", tmp_path / "tt2.yaml")
    assert r.exit_code == 2 and not (tmp_path / "tt2.yaml").exists(), r.output
    assert "no change this file can hold fits l40s" in r.output


def test_plan_write_to_says_when_the_file_alone_does_not_fit(tmp_path):
    """A torchtune file cannot hold FSDP with CPU offload; the plan's other changes (micro-batch 1, no checkpointing) are
    written and the file alone needs more than the card holds: said, with the figure."""
    tt = tmp_path / "tt.yaml"  # Llama-3.1-8B in full: 16 GB of bf16 weights alone, so no one-GPU plan fits 12 GB
    tt.write_text("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ntokenizer:\n  max_seq_len: 4096\n"
                  "batch_size: 2\ngradient_accumulation_steps: 8\noptimizer:\n  _component_: torch.optim.AdamW\n"
                  "  fused: True\nloss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n"
                  "enable_activation_checkpointing: True\ndtype: bf16\n")
    r = run("plan", "--from", tt, "--cards", "rtx3060-12gb", "--dataset-tokens", "1M", "--write-to", tmp_path / "c.yaml")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "not in the file (set at launch or by hand): parallelism=fsdp, offload=optimizer+params" in text
    written = estimate(from_config(tmp_path / "c.yaml").scenario.replace(gpu="rtx3060-12gb")).peak.required_bytes
    assert f"as written, without those keys, the run needs {written / 2**30:,.2f} GiB per GPU, over the rtx3060-12gb" in text
