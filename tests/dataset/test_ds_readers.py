"""Every format streams the same rows; bad files get one clear line naming the input."""

import json

import pytest
from dsutil import words, write_jsonl

from vramfit.dataset import DatasetError, analyze_dataset, readers
from vramfit.dataset import limits as dl
from vramfit.dataset.report import read_lengths
from vramfit.dataset.tokenize import load_encoder

SIZES = [3, 17, 40, 8, 120]


def _rows():
    return [{"text": words(n), "id": i} for i, n in enumerate(SIZES)]


def _lengths(path, tok_dir, **kw):
    return list(read_lengths(path, load_encoder(tok_dir), **kw).lengths)


def test_all_formats_give_the_same_lengths(tmp_path, tok_dir):
    expected = [n + 2 for n in SIZES]
    assert _lengths(write_jsonl(tmp_path / "d.jsonl", _rows()), tok_dir) == expected
    (tmp_path / "d.json").write_text(json.dumps(_rows()))
    assert _lengths(tmp_path / "d.json", tok_dir) == expected
    (tmp_path / "d.csv").write_text("id,text\n" + "".join(f"{r['id']},{r['text']}\n" for r in _rows()))
    assert _lengths(tmp_path / "d.csv", tok_dir) == expected
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(_rows()), tmp_path / "d.parquet", row_group_size=2)
    assert _lengths(tmp_path / "d.parquet", tok_dir) == expected


def test_saved_datasets_folders_are_read_without_datasets(tmp_path, tok_dir):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(_rows())
    ds.save_to_disk(str(tmp_path / "one"))
    assert _lengths(tmp_path / "one", tok_dir) == [n + 2 for n in SIZES]
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dd"))
    assert _lengths(tmp_path / "dd", tok_dir, split="test") == [SIZES[0] + 2]
    with pytest.raises(DatasetError, match=r"split: 'dev' is not a split .*valid values: .*train"):
        _lengths(tmp_path / "dd", tok_dir, split="dev")


def test_bad_input_names_the_problem(tmp_path, tok_dir, monkeypatch):
    with pytest.raises(DatasetError, match="^dataset: file not found"):
        analyze_dataset(tmp_path / "nope.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DatasetError, match=r"unknown file type '.txt'.*valid values: .jsonl"):
        analyze_dataset(tmp_path / "x.txt")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    with pytest.raises(DatasetError, match="line 2 of bad.jsonl is not JSON"):
        analyze_dataset(tmp_path / "bad.jsonl")
    write_jsonl(tmp_path / "nofield.jsonl", [{"title": "a", "body": "b"}])
    with pytest.raises(DatasetError, match=r"^field: no text field found.*valid values: body, title"):
        analyze_dataset(tmp_path / "nofield.jsonl")
    write_jsonl(tmp_path / "numbers.jsonl", [{"text": 1, "id": 2}])  # the column is there, its values are not text
    with pytest.raises(DatasetError, match=r"^field: column 'text' holds int, not text; name "
                                           r"another column with --field.*valid values: id, text"):
        analyze_dataset(tmp_path / "numbers.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="holds no rows"):
        analyze_dataset(tmp_path / "empty.jsonl")
    (tmp_path / "dir").mkdir()
    with pytest.raises(DatasetError, match="not one saved by datasets"):
        analyze_dataset(tmp_path / "dir")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        analyze_dataset(tmp_path / "bad.parquet")


def test_limits_are_enforced(tmp_path, monkeypatch):
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "x" * 100}, {"text": "y"}])
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 50)
    with pytest.raises(DatasetError, match="line 1 of d.jsonl is longer than 50 bytes"):
        analyze_dataset(p)
    monkeypatch.setattr(readers, "MAX_FILE_BYTES", 10)
    with pytest.raises(DatasetError, match="over the limit of"):
        analyze_dataset(p)
    with pytest.raises(DatasetError, match=f"sample: must be from 1 to {dl.MAX_SAMPLE_ROWS:,}"):
        analyze_dataset(p, sample=0)


def test_row_limit(tmp_path, monkeypatch):
    from vramfit.dataset import report

    monkeypatch.setattr(report, "MAX_ROWS", 3)
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "x"}] * 5)
    with pytest.raises(DatasetError, match="more than 3 rows; pass --sample N"):
        analyze_dataset(p)


def test_sample_memory_is_bounded(tmp_path, monkeypatch):
    from vramfit.dataset import report

    monkeypatch.setattr(report, "MAX_SAMPLE_CHARS", 250)
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": "x" * 100}] * 5)
    assert analyze_dataset(p, sample=2).sampled_rows == 2
    with pytest.raises(DatasetError, match="sample: the sampled rows hold over 250 characters"):
        analyze_dataset(p, sample=3)


def test_missing_columns_and_tokenless_rows_name_the_file(tmp_path, tok_dir):
    write_jsonl(tmp_path / "late.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}, {"text": "x"}])
    with pytest.raises(DatasetError, match=r"^dataset: row 2 of late.jsonl has no column 'messages' \(the dataset's "
                       r"messages column, found in the first row\)$"):
        analyze_dataset(tmp_path / "late.jsonl")
    write_jsonl(tmp_path / "blank.jsonl", [{"q": "", "a": ""}] * 3)
    with pytest.raises(DatasetError, match=r"^dataset: blank.jsonl has no tokens: the text in 'q', 'a' is empty in every row$"):
        analyze_dataset(tmp_path / "blank.jsonl", field_name="q,a")
    assert _lengths(write_jsonl(tmp_path / "eos.jsonl", [{"text": ""}]), tok_dir) == [2]  # BOS and EOS: tokens


def test_a_byte_order_mark_is_not_part_of_the_first_column_or_the_array(tmp_path):
    bom = b"\xef\xbb\xbf"
    (tmp_path / "excel.csv").write_bytes(bom + b"text,id\nhello there,1\n")
    assert list(readers.iter_rows(tmp_path / "excel.csv")) == [{"text": "hello there", "id": "1"}]
    (tmp_path / "rows.json").write_bytes(bom + b'[{"text": "hi"}]')
    assert readers.detect_format(tmp_path / "rows.json") == "json"
    assert analyze_dataset(tmp_path / "excel.csv").rows == 1


def test_a_huge_integer_in_a_row_does_not_name_pythons_setting(tmp_path):
    (tmp_path / "big.jsonl").write_text('{"text": 1' + "0" * 5000 + "}\n")
    with pytest.raises(DatasetError) as info:
        list(readers.iter_rows(tmp_path / "big.jsonl"))
    assert str(info.value) == "dataset: line 1 of big.jsonl is not JSON: holds a number too large to read (over 4,300 digits)"


@pytest.mark.parametrize("case", ["bad-json", "a-list", "missing-arrow"])
def test_a_broken_datasets_folder_is_one_line(tmp_path, case):
    """They raised JSONDecodeError, AttributeError and FileNotFoundError tracebacks."""
    folder = tmp_path / "hf"
    folder.mkdir()
    if case == "missing-arrow":
        (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
        want = "hf/state.json lists data-00000-of-00001.arrow, which is not in the folder"
    else:
        (folder / "dataset_dict.json").write_text("{bad" if case == "bad-json" else "[1, 2]")
        want = "hf/dataset_dict.json is not a readable datasets index (a JSON object with its splits)"
    with pytest.raises(DatasetError) as err:
        list(readers.iter_rows(folder))
    assert want in str(err.value)


def test_corrupt_parquet_pages_are_one_line(tmp_path):
    """A valid footer over a corrupt data page failed only in iter_batches, outside the guarded open."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    rows = [{"text": words(400 + i)} for i in range(50)]
    pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy")
    raw = bytearray(path.read_bytes())
    for i in range(64, len(raw) // 2):  # the column chunk's pages, well before the footer
        raw[i] ^= 0x5A
    path.write_bytes(bytes(raw))
    with pytest.raises(DatasetError) as err:
        list(readers.iter_rows(path))
    assert str(err.value).startswith("dataset: c.parquet is not a readable Parquet file")


def test_an_empty_messages_list_is_named_as_one(tmp_path, tok_dir):
    """It said "expected a list of messages, got list"."""
    from vramfit.web.translate import to_pt, untranslated

    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}, {"messages": []}])
    with pytest.raises(DatasetError) as err:
        analyze_dataset(path, tokenizer=tok_dir)
    assert "expected a list of messages ({role, content} objects), got an empty list" in str(err.value)
    assert untranslated([str(err.value)]) == [] and "recebeu-se uma lista vazia" in to_pt(str(err.value))
