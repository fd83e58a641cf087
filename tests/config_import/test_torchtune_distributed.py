"""torchtune configs for the distributed recipes (``tune run --nproc_per_node N lora_finetune_distributed``) imported as
one GPU with no sharding unless they named an FSDP option: llama3_1/8B_full.yaml read 60.6 GiB on one unsharded GPU
and no "pass --num-gpus" line. Every distributed config has a validation set, which only the distributed recipes read,
and no single-device config has one (pytorch/torchtune@bd2a0fc recipes/configs)."""

from pathlib import Path

import pytest

from vramfit import estimate
from vramfit.config_import import from_text

FIX = Path(__file__).parent / "fixtures"
SINGLE = (FIX / "torchtune_qlora.yaml").read_text()
VAL = ("run_val_every_n_steps: null\ndataset_val:\n  _component_: torchtune.datasets.alpaca_cleaned_dataset\n"
       "  split: train[95%:]\nbatch_size_val: ${batch_size}\n")


@pytest.mark.parametrize("extra, marker", [(VAL, "run_val_every_n_steps"),
                                           ("custom_sharded_layers: ['tok_embeddings', 'output']\n",
                                            "custom_sharded_layers")])
def test_a_distributed_recipe_config_shards_and_asks_for_the_gpu_count(extra, marker):
    imp = from_text(SINGLE + extra, dialect="torchtune")
    sc = imp.scenario
    assert (sc.parallelism.value, sc.offload.value, sc.num_gpus) == ("fsdp", "none", 1)
    lines = [e.line() for e in imp.entries]
    assert "only the distributed recipes read" in next(e for e in imp.entries if e.key == marker).line()
    assert any("num_gpus" in x and "pass --num-gpus" in x for x in lines)
    eight = estimate(sc.replace(num_gpus=8))
    assert eight.peak.allocated_bytes < estimate(sc).peak.allocated_bytes  # the shard is a real input now
    one = from_text(SINGLE, dialect="torchtune")
    assert one.scenario.parallelism.value == "none"
    assert not any("pass --num-gpus" in e.line() for e in one.entries)
