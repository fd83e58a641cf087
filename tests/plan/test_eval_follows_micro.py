"""A config that leaves its evaluation batch to the micro-batch (Axolotl's eval_batch_size default,
axolotl src/axolotl/utils/config/__init__.py l. 208-209) evaluates at every micro-batch the planner tries: `fit`'s
largest micro-batch is then one that `estimate --micro-batch-size` says fits, and one more does not."""

import json
from pathlib import Path

from typer.testing import CliRunner

from vramfit import estimate, from_config
from vramfit.cli.main import app
from vramfit.gpus import get_gpu
from vramfit.plan import changes_to_fit, fit
from vramfit.plan.verdict import fits, limit_bytes

runner = CliRunner()
GPU = "h100-sxm"
CONFIG = """base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
sequence_len: 4096
micro_batch_size: 1
gradient_accumulation_steps: 8
gradient_checkpointing: true
plugins:
  - axolotl.integrations.liger.LigerPlugin
liger_fused_linear_cross_entropy: true
val_set_size: 0.05
eval_steps: 10
bf16: true
flash_attention: true
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "axolotl.yml"
    path.write_text(CONFIG)
    return path


def _fits(sc) -> bool:
    g = get_gpu(GPU)
    return fits(estimate(sc), limit_bytes(g, 0.05))


def test_fit_moves_the_evaluation_batch_with_the_micro_batch(tmp_path):
    imp = from_config(_config(tmp_path))
    assert imp.eval_follows_micro and imp.scenario.eval_batch_size == 1
    sc = imp.scenario.replace(gpu=GPU)
    held = fit(sc, GPU).max_micro_batch  # the evaluation batch held at 1
    mb = fit(sc, GPU, eval_follows_micro=True).max_micro_batch
    assert mb is not None and 1 < mb < held  # whole logits at evaluation: the follow rule binds first
    assert _fits(sc.replace(micro_batch_size=mb, eval_batch_size=mb))
    assert not _fits(sc.replace(micro_batch_size=mb + 1, eval_batch_size=mb + 1))
    # the evaluation pass is the peak that stops it
    over = estimate(sc.replace(micro_batch_size=mb + 1, eval_batch_size=mb + 1))
    assert over.peak.phase == "evaluate"


def test_a_scenario_without_evaluation_is_unchanged(tmp_path):
    sc = from_config(_config(tmp_path)).scenario.replace(gpu=GPU, eval_batch_size=0)
    assert fit(sc, GPU, eval_follows_micro=True).max_micro_batch == fit(sc, GPU).max_micro_batch


def test_changes_evaluate_at_their_micro_batch(tmp_path):
    """A micro-batch change offered for a card the run does not fit is estimated with the evaluation batch that
    follows it."""
    sc = from_config(_config(tmp_path)).scenario.replace(gpu="rtx4090", micro_batch_size=4, eval_batch_size=4)
    for change in changes_to_fit(sc, "rtx4090", eval_follows_micro=True):
        mb = change.changes.get("micro_batch_size")
        if mb is not None and "eval_batch_size" not in change.changes:
            got = estimate(sc.replace(**change.changes, eval_batch_size=mb).replace(gpu="rtx4090"))
            assert change.device_bytes == got.peak.device_bytes


def test_cli_fit_answer_is_what_estimate_fits(tmp_path):
    path = str(_config(tmp_path))
    r = runner.invoke(app, ["fit", "--from", path, "--gpu", GPU, "--json"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    mb = json.loads(r.stdout)["max_micro_batch"]
    for size, want in ((mb, "fits"), (mb + 1, "does not fit")):
        e = runner.invoke(app, ["estimate", "--from", path, "--gpu", GPU, "--micro-batch-size", str(size), "--json"])
        d = json.loads(e.stdout)
        assert d["scenario"]["eval_batch_size"] == size
        assert next(f["verdict"] for f in d["fits"] if f["gpu_id"] == GPU) == want
    pinned = runner.invoke(app, ["fit", "--from", path, "--gpu", GPU, "--eval-batch-size", "1", "--json"])
    assert json.loads(pinned.stdout)["max_micro_batch"] > mb  # an explicit evaluation batch stays where it is put
