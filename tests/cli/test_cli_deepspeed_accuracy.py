"""`vramfit estimate` with a DeepSpeed config, a framework version, and its accuracy line."""

import json

from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
MODEL = "meta-llama/Llama-3.1-8B"


def run(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_inline_deepspeed_config_sizes_the_reduce_bucket():
    ds = json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}})
    r = run("estimate", "--model", MODEL, "--method", "full", "--num-gpus", "4", "--deepspeed-config", ds, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["scenario"]["parallelism"] == "zero2"
    assert d["scenario"]["deepspeed_config"] == {"zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000}}
    # one bf16 bucket (overlap_comm off), from the first gradient hook on: in the blocks' backward
    block = next(p for p in d["phases"] if p["phase"] == "backward-block")
    assert block["breakdown"]["comm_buffers"] == 500_000_000 * 2
    # measured: DeepSpeed's Muon blog figure (found.jsonl DS_MUON_2605-1, Qwen2.5-3B full fine-tuning under ZeRO-2)
    assert d["accuracy"]["measured_path"] is True and d["accuracy"]["cases"] == ["DS_MUON_2605-1"]


def test_accuracy_line_and_one_line_errors():
    r = run("estimate", "--model", MODEL, "--method", "lora", "--framework", "litgpt")
    assert r.exit_code == 0, r.output
    # 10 lit-gpt 2023 resource-table rows, lit-gpt's October-2023 tutorial bf16-mixed row, 12 litgpt 2024 config-hub rows,
    # the August-2023 tutorial's two StableLM-3B LoRA rows, the September-2023 dataset tutorial's Falcon-7B row and the
    # March-2024 'Zero to LitGPT' tutorial's phi-2 run
    assert "accuracy: 27 published measurement(s) on this path (litgpt · lora · none · none · none)" in r.output
    bad = run("estimate", "--model", MODEL, "--framework-version", "transformers-4.30")
    assert bad.exit_code == 2
    assert "framework_version: hf has no modelled release 'transformers-4.30'" in bad.output
    bad = run("estimate", "--model", MODEL, "--deepspeed-config", "{not json")
    assert bad.exit_code == 2 and "deepspeed_config: the inline JSON is not valid JSON" in bad.output


def test_a_library_named_twice_in_framework_version_is_refused():
    """Joined releases apply in order, so a second release of one library would silently replace the first one's
    changes (estimate/framework.py check_version)."""
    for value, lib, first, second in (("trl-0.14+trl-0.21", "trl", "trl-0.14", "trl-0.21"),
                                      ("transformers-4.40+peft-0.11+transformers-4.40", "transformers",
                                       "transformers-4.40", "transformers-4.40")):
        r = run("estimate", "--model", MODEL, "--framework-version", value)
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert f"framework_version: '{value}' names {lib} twice ('{first}' and '{second}')" in " ".join(r.output.split())
    ok = run("estimate", "--model", MODEL, "--framework-version", "transformers-4.44+peft-0.11+trl-0.14", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["scenario"]["framework_version"] == "transformers-4.44+peft-0.11+trl-0.14"


def test_zero_hpz_in_the_deepspeed_config_is_the_node_shard_scope():
    """ZeRO++ hpZ (zero_hpz_partition_size = one node's GPUs) runs the same estimate as shard_scope node with that
    config; a size or layout the model does not cover is one line (estimate/deepspeed.py _hpz_keys)."""
    ds = {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    base = ("estimate", "--model", MODEL, "--method", "full", "--num-gpus", "16", "--num-nodes", "2")
    hpz = json.loads(run(*base, "--deepspeed-config", json.dumps(ds), "--json").stdout)
    assert hpz["scenario"]["shard_scope"] == "node"
    assert hpz["scenario"]["deepspeed_config"]["zero_optimization"]["zero_hpz_partition_size"] == 8
    plain = {"zero_optimization": {"stage": 3}}
    same = json.loads(run(*base, "--shard-scope", "node", "--deepspeed-config", json.dumps(plain), "--json").stdout)
    flat = json.loads(run(*base, "--deepspeed-config", json.dumps(plain), "--json").stdout)
    assert hpz["peak"]["device_bytes"] == same["peak"]["device_bytes"] != flat["peak"]["device_bytes"]
    head = ("estimate", "--model", MODEL, "--method", "full", "--num-gpus", "16")
    for extra, text in ((("--num-nodes", "2", "--shard-scope", "all"), "means shard_scope node, but shard_scope is all"),
                        (("--num-nodes", "4"), "this run has 4 node(s) of 4 GPUs")):
        r = run(*head, *extra, "--deepspeed-config", json.dumps(ds))
        assert r.exit_code == 2 and text in " ".join(r.output.split())
    one = run("estimate", "--model", MODEL, "--method", "full", "--num-gpus", "8", "--deepspeed-config", json.dumps(ds))
    assert one.exit_code == 2 and "this run has 1 node(s) of 8 GPUs" in " ".join(one.output.split())
