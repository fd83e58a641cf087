"""POST /api/dataset with a scenario: the reserved figure's spread over random orders of the file's lengths
(vramfit.dataset.spread), truncated at the scenario's seq_len as `vramfit estimate --dataset` takes them."""

from __future__ import annotations

import json

# 4 characters per token on "text" rows: about 11, 101, 101, 501 and 2,501 tokens (the last truncated at 2,048)
ROWS = "".join(json.dumps({"text": "word " * n}) + "\n" for n in (8, 80, 80, 400, 2000))
SCENARIO = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora"}


def _post(client, scenario=None):
    data = {} if scenario is None else {"scenario": json.dumps(scenario)}
    r = client.post("/api/dataset", files={"file": ("s.jsonl", ROWS.encode())}, data=data)
    assert r.status_code == 200, r.text
    return r.json()


def test_upload_states_the_spread(client):
    from vramfit import estimate

    out = _post(client, SCENARIO)
    fixed = estimate(SCENARIO, seq_len=2048).peak.reserved_bytes  # the longest sample truncated at seq_len 2,048
    assert out["reserved_spread"] == {"fixed_reserved_bytes": fixed, "p10_bytes": 0, "median_bytes": 782_237_696,
                                      "p90_bytes": 987_758_592, "orders": 50, "samples": 5, "capped_by_gpu": None}
    assert "in random order, +0.00…+0.92 GiB (median +0.73;" in out["reserved_spread_text"]


def test_the_card_bounds_it_and_no_scenario_gives_none(client):
    over = _post(client, {**SCENARIO, "gpu": "rtx4090"})["reserved_spread"]  # 31 GiB reserved: already over the card
    assert (over["p90_bytes"], over["capped_by_gpu"]) == (0, "rtx4090")
    bare = _post(client)
    assert bare["reserved_spread"] is None and bare["reserved_spread_text"] is None
    fixed = _post(client, {**SCENARIO, "seq_len": 8})  # every sample truncated to 8 tokens: one length, no spread
    assert fixed["reserved_spread"] is None


def test_the_spread_sentence_reads_in_portuguese():
    """The PT page runs the same rules on POST /api/dataset's sentence (static/dataset.js VFTr.text)."""
    from vramfit.dataset.spread import spread_line
    from vramfit.web.translate import to_pt, untranslated

    base = {"fixed_reserved_bytes": 3 * 2**30, "p10_bytes": 2**29, "p90_bytes": 2**30, "median_bytes": 3 * 2**28,
            "orders": 50}
    room, capped = (spread_line({**base, "capped_by_gpu": c}) for c in (None, "NVIDIA T4"))
    assert untranslated([room, capped]) == []
    assert to_pt(room).startswith("reservada 3,00 GiB com comprimento fixo; com os comprimentos deste conjunto de "
                                  "dados em ordem aleatória, +0,50…+1,00 GiB (mediana +0,75; percentis 10–90 de 50 ")
    assert "até à memória livre da NVIDIA T4 (perto da capacidade, o PyTorch" in to_pt(capped)
