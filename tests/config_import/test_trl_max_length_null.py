"""TRL ``max_length: null`` means no truncation (SFTConfig, trl 1.16.0), not the 1024 default it was read as: the
length then comes from the data, so the scenario's seq_len is a default said as such; packing refuses it in TRL."""

import pytest

from vramfit.config_import import from_text
from vramfit.errors import ScenarioError
from vramfit.scenario import Scenario

HEAD = "model_name_or_path: Qwen/Qwen2.5-0.5B\n"
DEFAULT = Scenario.__dataclass_fields__["seq_len"].default


def _entry(imp, key):
    return next(e for e in imp.entries if e.key == key)


@pytest.mark.parametrize("extra", ["", "padding_free: true\n"])
def test_null_max_length_is_no_truncation_not_1024(extra):
    imp = from_text(HEAD + "max_length: null\n" + extra, dialect="trl")
    assert "seq_len" not in imp.overrides and imp.scenario.seq_len == DEFAULT != 1024
    assert _entry(imp, "max_length").line() == "read     max_length: None (no truncation)"
    assert _entry(imp, "seq_len").line() == (
        f"default  seq_len: {DEFAULT} → seq_len={DEFAULT}  [max_length is null: TRL truncates nothing, the data's "
        "longest sample sets the length; pass --seq-len, or --dataset FILE --max-length none to read it]")


def test_null_max_length_with_packing_is_refused_as_trl_does():
    with pytest.raises(ScenarioError, match=r"max_length: null \(no truncation\) with packing: true; TRL refuses it"):
        from_text(HEAD + "max_length: null\npacking: true\n", dialect="trl")


def test_absent_and_given_max_length_are_unchanged():
    assert from_text(HEAD, dialect="trl").overrides["seq_len"] == 1024
    assert from_text(HEAD + "max_length: 4096\npacking: true\n", dialect="trl").overrides["seq_len"] == 4096


def test_null_max_seq_length_of_older_trl_names_both_releases():
    """``max_seq_length`` (TRL before 0.20) null: 1024 on TRL <= 0.14 (min(tokenizer.model_max_length, 1024)), no
    truncation on 0.15-0.19; it was read as seq_len None and the estimate ran at the default without saying so."""
    imp = from_text(HEAD + "max_seq_length: null\n", dialect="trl")
    assert "seq_len" not in imp.overrides and imp.scenario.seq_len == DEFAULT
    assert _entry(imp, "max_seq_length").line() == (
        "read     max_seq_length: None (null: 1024 on TRL <= 0.14, no truncation on 0.15-0.19)")
    assert "TRL <= 0.14 trains at 1024 tokens, 0.15-0.19 truncate nothing" in _entry(imp, "seq_len").line()


def test_null_max_seq_length_with_packing_is_trl_0_14_s_1024():
    # TRL 0.15-0.19 refuse packing without a length ("When packing is enabled, `max_seq_length` can't be `None`")
    imp = from_text(HEAD + "max_seq_length: null\npacking: true\n", dialect="trl")
    assert imp.overrides["seq_len"] == 1024 and imp.scenario.seq_len == 1024
    assert "min(model_max_length, 1024)" in _entry(imp, "max_seq_length").line()


@pytest.mark.parametrize("key", ["max_length", "max_seq_length"])
def test_a_mapping_as_the_length_is_one_line_not_a_traceback(key):
    # a mapping flattens to key.a.b: it was taken for null and the report's entry was missing (KeyError traceback)
    with pytest.raises(ScenarioError, match=rf"unknown trl key '{key}\.a\.b'"):
        from_text(HEAD + f"{key}: {{a: {{b: 1}}}}\n", dialect="trl")
