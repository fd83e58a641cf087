"""One parameter count for the simulator and the measure harness (they disagreed on tied weights)."""

import pytest

torch = pytest.importorskip("torch")


def _tiny_llama(tied: bool):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def test_simulator_and_measure_share_one_count():
    from vramfit.measure.build import count_parameters as measure_count
    from vramfit.sim.count import count_parameters

    assert measure_count is count_parameters


@pytest.mark.parametrize("tied", [True, False])
def test_tied_embeddings_count_once(tied):
    from types import SimpleNamespace

    from vramfit.sim.count import count_parameters
    from vramfit.sim.run import _count_params

    m = _tiny_llama(tied)
    unique = sum(p.numel() for p in m.parameters())  # torch deduplicates shared tensors
    per_module = sum(p.numel() for mod in m.modules() for p in mod.parameters(recurse=False))
    assert (per_module > unique) is tied  # the tie is real: the old simulator count was per module
    assert count_parameters(m) == (unique, unique)
    assert _count_params(SimpleNamespace(model=m)) == (unique, unique)


def test_packed_4bit_weight_counts_its_unpacked_shape():
    from vramfit.sim.count import count_parameters

    lin = torch.nn.Linear(8, 4, bias=False)
    lin.weight = torch.nn.Parameter(torch.zeros(16, 1, dtype=torch.uint8), requires_grad=False)
    assert count_parameters(lin) == (32, 0)
