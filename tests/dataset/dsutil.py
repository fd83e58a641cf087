"""Helpers of the dataset tests: a tokenizer the tests build themselves (WordLevel on whitespace; nothing downloaded) and dataset writers."""

import json

WORDS = [f"w{i}" for i in range(50)]
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"


def build_tokenizer(folder, template=TEMPLATE):
    """Whitespace words, BOS ``<s>`` added by the post-processor, ``</s>`` a special token.

    A text of n words counts n + 2 tokens after TRL appends the EOS (BOS + words + EOS); a chat turn
    renders as ``<|role|> words </s>``: n + 2 tokens, no BOS (chat templates are tokenized without
    special tokens).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "<|user|>": 3, "<|assistant|>": 4, "<|system|>": 5}
    for w in WORDS:
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    eos = {"__type": "AddedToken", "content": "</s>", "lstrip": False, "normalized": False, "rstrip": False,
           "single_word": False, "special": True}  # the form transformers saves special tokens in
    cfg = {"bos_token": "<s>", "eos_token": eos}
    if template:
        cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


def words(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path



def make_readme_fixtures(folder):
    """``chat.jsonl`` (200 chats, long-tailed lengths, seeded) and ``tok/`` for the README example."""
    import random

    rng = random.Random(20)
    rows = []
    for _ in range(200):
        n = min(6000, int(rng.lognormvariate(5.0, 0.9)))
        rows.append({"messages": [{"role": "user", "content": words(max(1, n // 3))},
                                  {"role": "assistant", "content": words(max(1, n - n // 3))}]})
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "chat.jsonl", rows)
    build_tokenizer(folder / "tok")
