"""A config.json whose field transformers' strict config dataclass refuses is a ModelError (HTTP 422, CLI exit 2),
not a traceback: huggingface_hub's ``StrictDataclassFieldValidationError`` is not a TypeError."""

import pytest

pytest.importorskip("transformers")


def test_a_field_of_the_wrong_type_is_a_model_error():
    from vramfit.errors import ModelError
    from vramfit.models.hf_config import spec_from_hf_config

    cfg = {"model_type": "smollm3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "no_rope_layers": False}
    with pytest.raises(ModelError, match="no_rope_layers"):
        spec_from_hf_config(cfg)
