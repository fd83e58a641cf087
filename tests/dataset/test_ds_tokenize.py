"""Token counts as TRL renders rows: exact with a local tokenizer, flagged approximation without."""

import pytest
from dsutil import build_tokenizer, words, write_jsonl

from vramfit.dataset import DatasetError, analyze_dataset
from vramfit.dataset.report import read_lengths
from vramfit.dataset.tokenize import load_encoder


def lengths(path, tok, **kw):
    return list(read_lengths(path, load_encoder(tok), **kw).lengths)


def test_text_rows_count_bos_words_and_the_appended_eos(tmp_path, tok_dir):
    p = write_jsonl(tmp_path / "t.jsonl", [{"text": words(n)} for n in (1, 7, 30)])
    assert lengths(p, tok_dir) == [3, 9, 32]
    # a text already ending with the EOS gets no second one (TRL add_eos)
    p2 = write_jsonl(tmp_path / "e.jsonl", [{"text": words(4) + "</s>"}])
    assert lengths(p2, tok_dir) == [6]


def test_messages_go_through_the_chat_template_without_special_tokens(tmp_path, tok_dir):
    rows = [{"messages": [{"role": "user", "content": words(5)}, {"role": "assistant", "content": words(3)}]}]
    p = write_jsonl(tmp_path / "m.jsonl", rows)
    assert lengths(p, tok_dir) == [(5 + 2) + (3 + 2)]
    # ShareGPT from/value conversations are converted to role/content as TRL does
    conv = [{"conversations": [{"from": "human", "value": words(5)}, {"from": "gpt", "value": words(3)}]}]
    assert lengths(write_jsonl(tmp_path / "c.jsonl", conv), tok_dir) == [12]


def test_chat_template_jinja_file_wins_over_the_config(tmp_path):
    d = build_tokenizer(tmp_path / "tok")
    (d / "chat_template.jinja").write_text("{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}")
    p = write_jsonl(tmp_path / "m.jsonl", [{"messages": [{"role": "user", "content": words(4)}]}])
    assert lengths(p, d) == [1 + 4]


def test_prompt_completion_counts_both_plus_eos(tmp_path, tok_dir):
    p = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": words(3) + " ", "completion": words(6)}])
    assert lengths(p, tok_dir) == [1 + 9 + 1]
    conv = [{"prompt": [{"role": "user", "content": words(3)}], "completion": [{"role": "assistant", "content": words(2)}]}]
    assert lengths(write_jsonl(tmp_path / "pcc.jsonl", conv), tok_dir) == [5 + 4]


def test_named_field(tmp_path, tok_dir):
    p = write_jsonl(tmp_path / "f.jsonl", [{"body": words(10), "text": words(1)}])
    assert lengths(p, tok_dir, field_name="body") == [12]
    with pytest.raises(DatasetError, match="field: no column 'nope'"):
        lengths(p, tok_dir, field_name="nope")


def test_without_a_tokenizer_the_approximation_is_flagged(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"text": "x" * 9}, {"text": "y" * 400}])
    r = analyze_dataset(p)
    assert r.exact_tokens is False
    assert r.sample_tokens == 3 + 100  # ceil(9 / 4) + 400 / 4
    assert any("approximate" in n for n in r.notes)
    assert analyze_dataset(p, chars_per_token=2).sample_tokens == 5 + 200


def test_messages_without_a_template_use_chatml_and_say_so(tmp_path):
    d = build_tokenizer(tmp_path / "tok", template=None)
    p = write_jsonl(tmp_path / "m.jsonl", [{"messages": [{"role": "user", "content": words(2)}]}])
    r = analyze_dataset(p, tokenizer=d)
    assert r.exact_tokens is True
    assert any("ChatML" in n for n in r.notes)


def test_tokenizer_errors_name_the_input(tmp_path):
    with pytest.raises(DatasetError, match="^tokenizer: not found: .*nothing is downloaded"):
        load_encoder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="holds no tokenizer.json"):
        load_encoder(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DatasetError, match="is not a tokenizers file"):
        load_encoder(tmp_path / "bad.json")
    with pytest.raises(DatasetError, match="chars_per_token"):
        load_encoder(None, 0.1)


@pytest.mark.slow  # importing transformers takes seconds
def test_counts_match_transformers_apply_chat_template(tmp_path):
    transformers = pytest.importorskip("transformers")
    template = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {% if m['role'] == 'assistant' %}"
                "{% generation %}{{ m['content'] }} </s>{% endgeneration %}{% else %}{{ m['content'] }} </s>{% endif %} "
                "{% endfor %}")
    d = build_tokenizer(tmp_path / "tok", template=template)
    hf = transformers.AutoTokenizer.from_pretrained(str(d))
    chats = [[{"role": "user", "content": words(n)}, {"role": "assistant", "content": words(2 * n + 1)}] for n in (1, 9, 40)]
    p = write_jsonl(tmp_path / "m.jsonl", [{"messages": c} for c in chats])
    expected = [len(hf.apply_chat_template(c, tokenize=True, return_dict=True)["input_ids"]) for c in chats]
    assert lengths(p, d) == expected == [1 + (n + 2) + (2 * n + 3) for n in (1, 9, 40)]
    texts = [words(n) for n in (3, 30)]
    t = write_jsonl(tmp_path / "t.jsonl", [{"text": x} for x in texts])
    assert lengths(t, d) == [len(hf(text=x + "</s>")["input_ids"]) for x in texts]
