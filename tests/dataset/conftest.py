"""Fixtures of the dataset tests."""

import pytest
from dsutil import build_tokenizer


@pytest.fixture
def tok_dir(tmp_path):
    return build_tokenizer(tmp_path / "tok")
