"""POST /api/dataset: a small uploaded file -> the length histogram (approximate tokens) and the card line."""

from __future__ import annotations

import json

from vramfit.web.dataset_upload import MAX_UPLOAD_BYTES

# 4 characters per token (vramfit.dataset.tokenize.CHARS_PER_TOKEN) on "text" rows
ROWS = "".join(json.dumps({"text": "word " * n}) + "\n" for n in (8, 80, 80, 400, 2000))
SCENARIO = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "gpu": "rtx4090"}


def test_upload_gives_the_histogram_and_the_card_line(client):
    r = client.post("/api/dataset", files={"file": ("sample.jsonl", ROWS.encode())},
                    data={"scenario": json.dumps(SCENARIO)})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rows"] == 5 and out["exact_tokens"] is False
    assert out["tokenizer"].startswith("approximation")
    assert sum(b["samples"] for b in out["histogram"]) == 5
    edges = [(b["from"], b["to"]) for b in out["histogram"]]
    assert edges[:3] == [(0, 64), (64, 128), (128, 256)] and all(a[1] == b[0] for a, b in zip(edges, edges[1:], strict=False))
    longest = out["percentiles"]["max"]
    assert 2400 <= longest <= 2600  # 2000 words x 5 chars / 4 chars per token, plus the template's EOS
    top = next(b for b in out["histogram"] if b["from"] <= longest < b["to"])
    assert top["samples"] == 1
    # the card's line is the planner's own figure for this scenario
    from vramfit.plan import fit
    from vramfit.scenario import parse_scenario

    f = fit(parse_scenario(SCENARIO), "rtx4090")
    assert out["card"] == {"gpu": "rtx4090", "name": f.gpu_name, "max_seq_len": f.max_seq_len}
    assert f.max_seq_len > 0


def test_without_a_card_no_line(client):
    r = client.post("/api/dataset", files={"file": ("s.jsonl", ROWS.encode())})
    assert r.status_code == 200 and r.json()["card"] is None


def test_bad_uploads(client):
    r = client.post("/api/dataset", files={"file": ("s.parquet", b"PAR1")})
    assert r.status_code == 422 and r.json()["key"] == "file" and ".jsonl" in r.json()["valid"]
    r = client.post("/api/dataset", files={"file": ("s.jsonl", b"{not json\n")})
    assert r.status_code == 422 and "\n" not in r.json()["error"]
    r = client.post("/api/dataset", files={"file": ("s.jsonl", ROWS.encode())}, data={"scenario": "{"})
    assert r.status_code == 422 and r.json()["key"] == "scenario"
    r = client.post("/api/dataset", files={"file": ("s.jsonl", b"x" * (MAX_UPLOAD_BYTES + 100_000))})
    assert r.status_code == 413
    r = client.post("/api/dataset", data={"scenario": "{}"})
    assert r.status_code == 422 and r.json()["key"] == "file"


def test_a_text_column_without_text_says_so_in_both_languages(client):
    from vramfit.web.translate import to_pt

    r = client.post("/api/dataset", files={"file": ("s.jsonl", b'{"text": 1}\n')})
    assert r.status_code == 422 and r.json()["key"] == "field"
    msg = r.json()["error"]
    assert msg.startswith("field: column 'text' holds int, not text; give that column what it names (or put the text "
                          "in a 'text' column as a string) and upload the file again"), msg
    assert to_pt(msg).startswith("field: a coluna 'text' contém int, não texto; dá a essa coluna o que o nome diz")
    # a messages column holding a string: it is text, just not messages (the hint said to make it a string)
    r = client.post("/api/dataset", files={"file": ("m.jsonl", b'{"messages": "x"}\n')})
    msg = r.json()["error"]
    assert msg.startswith("field: column 'messages' holds str, not a list of messages ({role, content} objects); give "
                          "that column what it names"), msg
    assert to_pt(msg).startswith("field: a coluna 'messages' contém str, não uma lista de mensagens (objetos")

