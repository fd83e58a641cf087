"""The yes/no columns of a GPU CSV (supports_bf16, supports_flash_attn2, peer_to_peer): a card declared without bf16 is
never planned for bf16 runs. true/false, y/n and 1/0 read as yes/no; any other word is refused naming the column, where
it was read as "unknown" and so as capable."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.gpus import parse_gpu_csv


def _card(value, column="supports_bf16"):
    return parse_gpu_csv(f"gpu_id,memory_gb,{column}\nmycard,24,{value}\n", "mine.csv")["mycard"]


@pytest.mark.parametrize("value", ["no", "false", "False", "n", "0", "no (Turing)"])
def test_no_in_any_spelling_is_no(value):
    assert _card(value).supports_bf16 is False
    assert _card(value, "supports_flash_attn2").supports_flash_attn2 is False
    assert _card(value, "peer_to_peer").peer_to_peer is False


@pytest.mark.parametrize("value", ["yes", "true", "Y", "1", "yes* (sm_120)"])
def test_yes_in_any_spelling_is_yes(value):
    assert _card(value).supports_bf16 is True


def test_empty_is_unknown_and_other_words_are_refused():
    assert _card("").supports_bf16 is None and _card("").peer_to_peer is True
    with pytest.raises(ScenarioError, match=r"^gpus: mine.csv line 2 \(gpu_id 'mycard'\): supports_bf16 must be yes or "
                                            r"no \(true/false, y/n and 1/0 read the same\), got 'maybe'"):
        _card("maybe")


def test_the_bundled_catalog_reads_as_before():
    from vramfit.gpus import get_gpu

    assert get_gpu("t4").supports_bf16 is False and get_gpu("t4").supports_flash_attn2 is False
    assert get_gpu("h100-sxm").supports_bf16 is True and get_gpu("rtx5090").supports_flash_attn2 is True
