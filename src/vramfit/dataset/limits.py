"""Named bounds on every resource the dataset pass uses, and its one error type.

Each limit is a plain integer with its unit in the name; going past one is a :class:`DatasetError`
(one line naming the input and the limit; the CLI exits 2, the web API answers 422).
"""

from __future__ import annotations

from vramfit.errors import ScenarioError

#: Largest dataset file read (bytes, decimal GB): a 10 GB JSON Lines file streams well inside it.
MAX_FILE_BYTES = 200 * 10**9
#: Largest single JSON Lines line or CSV record (bytes); longer is refused rather than buffered.
MAX_LINE_BYTES = 64 * 2**20
#: Largest ``.json`` file (one JSON array, parsed whole, so held in memory), bytes.
MAX_JSON_ARRAY_BYTES = 512 * 2**20
#: Most rows read (the lengths are kept as 4-byte integers: 200 MB at the limit).
MAX_ROWS = 50_000_000
#: Largest ``tokenizer.json`` / ``tokenizer_config.json`` read, bytes.
MAX_TOKENIZER_BYTES = 128 * 2**20
#: Largest ``--sample`` (rows tokenized; the sampled texts are held in memory).
MAX_SAMPLE_ROWS = 1_000_000
#: Most characters the ``--sample`` rows may hold together (they wait in memory for the tokenizer).
MAX_SAMPLE_CHARS = 2 * 10**9
#: Rows handed to the tokenizer at once (``Tokenizer.encode_batch`` runs them on all cores).
TOKENIZE_BATCH_ROWS = 1000
#: Characters a chat template may render for one row (guards against a runaway template).
MAX_RENDERED_CHARS = 64 * 2**20


class DatasetError(ScenarioError):
    """The dataset, its fields, the tokenizer or a length policy cannot be used; names the input."""

    def __init__(self, key: str, message: str, valid=None):
        super().__init__(key, message, valid)
