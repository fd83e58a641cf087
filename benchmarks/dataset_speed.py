"""Speed and memory of the dataset length pass (issue 20): tokens/s and peak RSS on a large JSON Lines file.

    python benchmarks/dataset_speed.py [--gb 1.0] [--dir /tmp/vramfit-ds-bench]

Writes a chat dataset of the given size (seeded, long-tailed turn lengths), trains a small BPE
tokenizer on its first 5 MB with ``tokenizers`` (nothing downloaded) and a ChatML template, then runs
``vramfit.dataset.analyze_dataset`` in a child process and reports rows, tokens, tokens/s, MB/s and
the child's peak resident memory (``getrusage(RUSAGE_CHILDREN).ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")


def write_dataset(path: Path, size_bytes: int) -> int:
    rng = random.Random(0)
    vocab = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    rows = 0
    with path.open("w", encoding="utf-8") as f:
        while f.tell() < size_bytes:
            n = min(20_000, int(rng.lognormvariate(5.3, 1.0)))
            user = " ".join(rng.choices(vocab, k=max(1, n // 3)))
            bot = " ".join(rng.choices(vocab, k=max(1, n - n // 3)))
            f.write(json.dumps({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": bot}]}) + "\n")
            rows += 1
    return rows


def train_tokenizer(data: Path, folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = []
    with data.open(encoding="utf-8") as f:
        while sum(map(len, texts)) < 5 * 10**6:
            texts += [m["content"] for m in json.loads(f.readline())["messages"]]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=8000, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": CHATML}))


CHILD = """
import sys, time, json
from vramfit.dataset import analyze_dataset, Policy
t0 = time.perf_counter()
r = analyze_dataset(sys.argv[1], tokenizer=sys.argv[2], policy=Policy(micro_batch_size=4, max_length=4096))
print(json.dumps({"s": time.perf_counter() - t0, "rows": r.rows, "tokens": r.sample_tokens, "p99": r.percentiles["p99"],
                  "peak": [r.peak_rows, r.peak_row_len], "processed": r.processed_tokens}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/vramfit-ds-bench"))
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    data = a.dir / "chat.jsonl"
    size = int(a.gb * 10**9)
    if not data.is_file() or abs(data.stat().st_size - size) > 10**6:
        t0 = time.perf_counter()
        rows = write_dataset(data, size)
        print(f"wrote {data} ({data.stat().st_size / 1e9:.2f} GB, {rows:,} rows) in {time.perf_counter() - t0:.0f} s")
    train_tokenizer(data, a.dir / "tok")
    out = subprocess.run([sys.executable, "-c", CHILD, str(data), str(a.dir / "tok")], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    mb = data.stat().st_size / 1e6
    print(f"length pass: {res['rows']:,} rows, {res['tokens']:,} tokens in {res['s']:.1f} s: "
          f"{res['tokens'] / res['s']:,.0f} tokens/s, {mb / res['s']:,.1f} MB/s; peak RSS {rss / 2**20:,.0f} MiB; "
          f"p99 {res['p99']:,} tokens, peak micro-batch {res['peak'][0]} x {res['peak'][1]:,}")


if __name__ == "__main__":
    main()
