"""Every resource limit of vramfit, one named constant each, with the reason for its value.

Input beyond a limit is refused *before* any work, with an error that names the limit, so that no
input can make the CLI, the library or the web API run for minutes, exhaust memory or crash. The
CLI and the web API share these constants (one validation for both). The README's "Limits" section
is generated from this module (``limits_markdown``) and checked by a test.

Plain data only: this module imports nothing from vramfit, so every module may import it.
"""

from __future__ import annotations

import ast
import inspect

# ----------------------------------------------------------------------- model architectures
#: Decoder layers of a config.json. The deepest published decoder has 126 (Llama 3.1 405B);
#: 1024 is 8x that, and bounds every per-layer list built from it.
MAX_CONFIG_LAYERS = 1024
#: Any other size of a config.json (hidden_size, vocab_size, intermediate_size, heads, experts,
#: positions). The largest published: vocab 262,208 (Gemma 3), intermediate 53,248 (Llama 3.1
#: 405B), positions 10,485,760 (Llama 4 Scout); 2^27 = 134,217,728 leaves room and keeps every
#: product of two sizes below 2^54, exact in a float.
MAX_CONFIG_SIZE = 2**27
#: Parameters a model may have: 10 trillion, about 25x the largest dense model published
#: (Llama 3.1 405B); the same bound as ``params`` (``models.generic.parse_param_count``).
MAX_PARAMS = 10**13
#: Nesting depth of a config.json or a scenario file: published configs nest 3 deep
#: (text_config -> rope_scaling -> list); deeper input is refused before it is walked.
MAX_CONFIG_DEPTH = 12
#: Items in one list of a config.json (layer_types has one per layer: at most MAX_CONFIG_LAYERS).
MAX_CONFIG_LIST = 1024

# -------------------------------------------------------------------------------- files
#: Bytes of a config.json, scenario file or GPU CSV: published config.json files are under 10 KB,
#: so 1 MiB is 100x that and parses in milliseconds.
MAX_FILE_BYTES = 2**20
#: Bytes of one line of a ``--batch`` file (a scenario object: under 1 KB in practice). The file
#: itself is read one line at a time, so its total size is not bounded.
MAX_BATCH_LINE_BYTES = 2**20

# ------------------------------------------------------------------------------ strings
#: Characters of a model string (catalog id, Hub id, config path): Linux allows a path of 4,096
#: bytes (PATH_MAX) and a file name of 255 (NAME_MAX); longer strings are refused before the file
#: system is asked.
MAX_MODEL_CHARS = 4096
#: Characters of one path component (a file or directory name): NAME_MAX on Linux.
MAX_NAME_CHARS = 255
#: Characters of a Hugging Face Hub repo id: huggingface_hub's ``validate_repo_id`` allows 96.
MAX_HUB_ID_CHARS = 96
#: Characters of a number given as text: the longest float literal that means something is
#: about 25; longer digit strings are refused before int()/float() parse them.
MAX_NUMBER_CHARS = 100
#: Characters of a run id or a ``--model`` filter in ``runs``/``calibrate``: run ids are 32 hex.
MAX_ID_CHARS = 256
#: Characters of a database URL or path given with ``--db``.
MAX_DB_CHARS = 4096
#: Characters of a value quoted inside an error message; longer values are cut with "…".
MAX_SHOWN_CHARS = 80
#: Characters of a whole one-line error message (valid-value lists included).
MAX_ERROR_CHARS = 1000

# ----------------------------------------------------------------------------- scenario
#: Tokens per sequence: 10 million, 10x the longest context trained in public (1M); catches typos.
MAX_SEQ_LEN = 10_000_000
#: Micro-batch size and gradient accumulation steps: catches typos before they reach arithmetic.
MAX_BATCH = 1_000_000
#: GPUs of a scenario: 100,000, about the largest training cluster built.
MAX_GPUS = 100_000
#: LoRA rank: 65,536, above the width of every catalog model (a rank above it adds nothing).
MAX_RANK = 65_536

# ----------------------------------------------------------------------------- commands
#: Values of one ``sweep --vary``: each is a full estimate and a table row.
MAX_SWEEP_VALUES = 200
#: Runs ``runs list --limit`` may ask for at once (SQLite's LIMIT is a signed 64-bit integer).
MAX_LIST_LIMIT = 1_000_000
#: Smallest model FLOPs utilisation the planner accepts: 0.1 %. Below it the time of a run
#: overflows (5e-324 divides by zero); no real training run is that slow.
MIN_MFU = 0.001

#: Optimizer steps of one ``vramfit measure`` run: the peak is reached by the second step (the
#: optimizer state exists after the first); 10,000 steps of a 7B model take hours.
MAX_MEASURE_STEPS = 10_000

# ----------------------------------------------------------------------------- simulator
#: GPUs of a simulated FSDP run: the fake process group builds per-rank state, so time grows with
#: the count (100,000 took 157 s); 1,024 ranks took 7 s here (125M parameters, seq 128).
SIM_MAX_GPUS = 1024
#: LoRA rank of a simulation: the adapters are real fake-tensor modules and rank 65,536 took
#: 116 s and 3 GB; 4,096 is 4x the largest rank in published recipes.
SIM_MAX_LORA_RANK = 4096
#: Decoder layers ``simulate --full-depth`` traces one by one (the default extrapolates from two
#: small depths instead); 160 covers every catalog model (Llama 3.1 405B: 126).
SIM_MAX_FULL_DEPTH_LAYERS = 160
#: Decoder layers up to which full fine-tuning traces its whole depth by default (sim/engine.py ``default_depths``):
#: Llama-3.1-70B's 80 (9.0 s, benchmarks/simulate_speed.py), not 405B's 126 (34 s under FSDP on 8 GPUs).
SIM_DEFAULT_FULL_DEPTH_LAYERS = 96

# ------------------------------------------------------------------------------------- web
#: Bytes of one web API request body: a scenario with a pasted config.json is under 20 KB.
MAX_WEB_BODY_BYTES = 256 * 1024
#: Values of one web ``/api/sweep``: each is a full estimate inside one HTTP request, so fewer
#: than the CLI's MAX_SWEEP_VALUES keep a request short.
MAX_WEB_SWEEP_VALUES = 64

# --------------------------------------------------------------------------------- network
#: Seconds one Hugging Face Hub lookup may take in all (TCP probe, retries and download of
#: config.json): a config.json is a few KB, and a Hub that has not answered in 20 s will not.
HUB_DEADLINE_S = 20.0


def limits() -> dict[str, tuple[object, str]]:
    """Every limit of this module: name -> (value, reason from its ``#:`` comment)."""
    source = inspect.getsource(inspect.getmodule(limits))  # type: ignore[arg-type]
    lines = source.splitlines()
    out: dict[str, tuple[object, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if not name.isupper():
                continue
            doc: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].startswith("#:"):
                doc.insert(0, lines[i][2:].strip())
                i -= 1
            out[name] = (globals()[name], " ".join(doc))
    return out


def limits_markdown() -> str:
    """The README's "Limits" paragraph: every named limit and its value (reasons: this module)."""
    items = []
    for name, (value, _) in limits().items():
        items.append(f"`{name}` {value:,}" if isinstance(value, int) else f"`{name}` {value:g}")
    return ", ".join(items) + ".\n"

#: memory_gb of a user's GPU row: far above any card (the largest catalog card holds 288 GB); 1e308 overflowed int()
MAX_GPU_MEMORY_GB = 100_000
