"""``--dataset`` and its options for ``estimate``, ``fit`` and ``plan``: plan from the real sequence lengths.

:func:`with_dataset_options` adds the options to a command (under its scenario options), runs the
length pass, prints its summary on stderr (stdout stays the command's, ``--json`` included), and
hands the command a scenario whose ``seq_len`` is the peak micro-batch's row length. Commands that
take a ``dataset_report`` parameter (``plan``) also receive the report for time and cost.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from vramfit.errors import ScenarioError
from vramfit.safe_input import writable_file, write_text_file
from vramfit.scenario import k_tokens

_D = "Dataset"
#: Files above this size show a progress line (rows read) on stderr while the length pass runs.
PROGRESS_MIN_BYTES = 100 * 10**6
err = Console(stderr=True)
GiB = 2**30

_OPTIONS: dict[str, tuple[Any, Any]] = {
    "dataset": (Optional[Path], typer.Option(None, "--dataset", help="JSON Lines, JSON, CSV, Parquet or a saved `datasets` folder: plan from its real lengths.", rich_help_panel=_D)),
    "tokenizer": (Optional[Path], typer.Option(None, "--tokenizer", help="Local tokenizer.json or folder (never downloaded); without it ~4 characters per token, flagged.", rich_help_panel=_D)),
    "field": (Optional[str], typer.Option(None, "--field", help="Column with the text or messages, or 'prompt,completion' (default: detected).", rich_help_panel=_D)),
    "split": (str, typer.Option("train", "--split", help="Split of a DatasetDict folder.", rich_help_panel=_D)),
    "max_length": (Optional[str], typer.Option(None, "--max-length", help="Truncation limit (TRL max_length; 8k = 8192), or none; default: the scenario's seq_len (none when padding-free without packing, as TRL requires).", rich_help_panel=_D)),
    "padding": (str, typer.Option("longest", "--padding", help="longest (in the micro-batch) or max_length.", rich_help_panel=_D)),
    "pad_to_multiple_of": (Optional[int], typer.Option(None, "--pad-to-multiple-of", help="Round padded lengths up to a multiple.", rich_help_panel=_D)),
    "packing": (str, typer.Option("none", "--packing", help="none, bfd, bfd_split or wrapped (TRL packing_strategy).", rich_help_panel=_D)),
    "padding_free": (bool, typer.Option(False, "--padding-free", help="Concatenate each micro-batch into one row (TRL padding_free).", rich_help_panel=_D)),
    "group_by_length": (bool, typer.Option(False, "--group-by-length", help="transformers' LengthGroupedSampler order.", rich_help_panel=_D)),
    "sample": (Optional[int], typer.Option(None, "--sample", help="Tokenize a uniform sample of N rows (faster; totals scaled).", rich_help_panel=_D)),
    "chars_per_token": (Optional[float], typer.Option(None, "--chars-per-token", help="The approximation without --tokenizer (default 4).", rich_help_panel=_D)),
    "length_chart": (Optional[Path], typer.Option(None, "--length-chart", help="Write the length distribution chart (.png or .svg).", rich_help_panel=_D)),
    "dataset_json": (Optional[Path], typer.Option(None, "--dataset-json", help="Write the dataset report as JSON.", rich_help_panel=_D)),
}


def option_defaults() -> dict[str, Any]:
    """Every dataset option at its default (no ``--dataset``)."""
    return {k: o.default for k, (_, o) in _OPTIONS.items()}


def _choice(key: str, value: str, enum):
    try:
        return enum(value)
    except ValueError:
        raise ScenarioError(key, f"unknown value {value!r}", [e.value for e in enum]) from None


def policy_from(opts: dict, sc) -> Any:
    """The :class:`vramfit.dataset.Policy` of the options and the scenario's batch sizes."""
    from vramfit.dataset import Packing, Padding, Policy
    from vramfit.plan.inputs import parse_count

    ml = opts["max_length"]
    if ml is None and opts["padding_free"] and opts["packing"] == "none":
        ml = "none"  # TRL truncates nothing padding-free without packing (it refuses a max_length there)
    # a sequence length: "8k" is 8192 as in --seq-len (parse_count reads k as 1,000 for counts)
    max_length = (sc.seq_len if ml is None else None if str(ml).lower() == "none"
                  else parse_count("max_length", k_tokens(str(ml).strip()), 1, 10**7))
    mult = opts["pad_to_multiple_of"]
    if mult is not None and not 1 <= mult <= 4096:
        raise ScenarioError("pad_to_multiple_of", f"must be from 1 to 4096, got {mult}")
    return Policy(micro_batch_size=sc.micro_batch_size, grad_accum=sc.grad_accum, max_length=max_length,
                  padding=_choice("padding", opts["padding"], Padding), pad_to_multiple_of=mult,
                  packing=_choice("packing", opts["packing"], Packing), padding_free=opts["padding_free"],
                  group_by_length=opts["group_by_length"])


def run_dataset(opts: dict, sc):
    """Analyze the dataset of ``opts`` for scenario ``sc`` (a progress line on stderr for large files)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from vramfit.dataset import analyze_dataset

    policy = policy_from(opts, sc)
    args = dict(tokenizer=opts["tokenizer"], policy=policy, field_name=opts["field"], split=opts["split"],
                sample=opts["sample"], chars_per_token=opts["chars_per_token"])
    big = opts["dataset"].is_file() and opts["dataset"].stat().st_size > PROGRESS_MIN_BYTES
    if not big:
        return analyze_dataset(opts["dataset"], **args)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task("reading rows")
        return analyze_dataset(opts["dataset"], on_rows=lambda n: bar.update(task, description=f"{n:,} rows read"), **args)


def _size(n: int) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 10**9 else f"{n / 1e6:,.2f} MB"


def summary_lines(r) -> list[str]:
    """The report as a few plain lines."""
    pol = r.policy
    trunc = f"max_length {pol['max_length']:,}" if pol["max_length"] else "no truncation"
    lines = [
        f"dataset {Path(r.path).name}: {r.rows:,} rows, {r.fields}, {r.sample_tokens:,} tokens "
        f"({'exact, ' + Path(r.tokenizer).parent.name if r.exact_tokens else 'approximate'}); lengths p50 {r.percentiles['p50']:,}, "
        f"p90 {r.percentiles['p90']:,}, p99 {r.percentiles['p99']:,}, max {r.percentiles['max']:,}",
        f"{trunc}: {r.truncated_samples:,} samples truncated, {r.dropped_tokens:,} tokens dropped ({r.dropped_share:.1%}); "
        f"suggested max_length {r.suggested_max_length:,} loses {r.suggested_loss_share:.1%}",
        f"peak micro-batch {r.peak_rows} × {r.peak_row_len:,} = {r.peak_tokens:,} tokens; typical (median) "
        f"{r.typical_rows} × {r.typical_row_len:,} = {r.typical_tokens:,}",
        f"per epoch: {r.train_tokens:,} tokens trained, {r.processed_tokens:,} processed (padding {r.padding_share:.1%})"
        + ("" if r.packing_efficiency is None else f", packing efficiency {r.packing_efficiency:.1%}")
        + ("; packed rows attend across samples" if r.cross_sample_attention else "")
        + f"; tokenized {_size(r.tokenized_bytes)}",
    ]
    return lines + [f"note: {n}" for n in r.notes]


def _outputs(opts: dict, r, sc) -> None:
    import json

    if opts["dataset_json"] is not None:
        write_text_file("dataset_json", opts["dataset_json"], json.dumps(r.to_dict(), indent=1) + "\n")
        err.print(f"wrote {opts['dataset_json']}", highlight=False, markup=False)
    if opts["length_chart"] is not None:
        from vramfit.dataset.chart import length_chart

        card = None
        if sc.gpu:
            from vramfit.calibration import load_active
            from vramfit.plan import fit

            f = fit(sc, sc.gpu, calibration=load_active())
            card = (f.gpu_name, f.max_seq_len)
        length_chart(r, opts["length_chart"], card)
        err.print(f"wrote {opts['length_chart']}", highlight=False)


def _memory_lines(sc, peak_seq: int, typical_seq: int, report=None) -> list[str]:
    """The peak and typical step's device figure; with ``report``, the reserved figure's spread over random orders
    of its lengths at the peak (:mod:`vramfit.dataset.spread`) where they give one."""
    from vramfit.calibration import load_active
    from vramfit.estimate import estimate

    cal = load_active()  # the figures the command's own result states (it applies the user's calibration)
    peak = estimate(sc, seq_len=peak_seq, calibration=cal)
    typ = estimate(sc, seq_len=typical_seq, calibration=cal).peak.device_bytes
    lines = [f"per GPU at micro-batch {sc.micro_batch_size}: peak {peak.peak.device_bytes / GiB:,.1f} GiB (seq_len "
             f"{peak_seq:,}), typical step {typ / GiB:,.1f} GiB (seq_len {typical_seq:,}); the scenario below uses the peak"]
    if report is not None:
        from vramfit.dataset.spread import reserved_spread, spread_line

        spread = reserved_spread(peak, report)
        lines += [] if spread is None else [spread_line(spread)]
    return lines


def _batch_options(opts: dict) -> dict | None:
    """The command line's dataset options for every ``--batch`` line (None without ``--dataset``); the report files
    belong to one scenario and are refused."""
    if opts["dataset"] is None:
        given = [k for k, (_, o) in _OPTIONS.items() if opts[k] != o.default]
        if given:
            raise ScenarioError("dataset", "--" + given[0].replace("_", "-") + " needs --dataset FILE")
        return None
    for key in ("dataset_json", "length_chart"):
        if opts[key] is not None:
            raise ScenarioError(key, "writes one scenario's report: not with --batch")
    return opts


def with_dataset_options(func: Callable[..., Any], *, per_row_bound: bool | None = None) -> Callable[..., Any]:
    """Add the dataset options to a command taking ``scenario_args``/``scenario_file`` (apply under
    :func:`vramfit.cli.options.with_scenario_options`). A command with a ``dataset_report`` parameter receives the
    report; its scenario's ``seq_len`` is the peak micro-batch's. ``per_row_bound`` (default: when it takes the report)
    says the command varies the micro-batch (``plan``, ``fit``): the reserved spread then goes to stderr, while a
    command that states it in its own result (``estimate``) passes False."""
    sig = inspect.signature(func)
    hints = typing.get_type_hints(func)
    wants_report = "dataset_report" in sig.parameters
    per_row = wants_report if per_row_bound is None else per_row_bound
    own = [p.replace(annotation=hints.get(n, p.annotation)) for n, p in sig.parameters.items()
           if n not in ("dataset_report", "dataset_options")]
    extra = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=o, annotation=t) for k, (t, o) in _OPTIONS.items()]

    def wrapper(**kwargs: Any) -> Any:
        opts = {k: kwargs.pop(k) for k in _OPTIONS}
        if kwargs.get("batch") is not None and "dataset_options" in sig.parameters:  # each line analysed on its own
            return func(**kwargs, dataset_report=None, dataset_options=_batch_options(opts))
        if opts["dataset"] is None:
            given = [k for k, (_, o) in _OPTIONS.items() if opts[k] != o.default]
            if given:
                raise ScenarioError("dataset", "--" + given[0].replace("_", "-") + " needs --dataset FILE")
            return func(**kwargs, **({"dataset_report": None} if wants_report else {}))
        from vramfit.cli.options import build_scenario

        for key in ("dataset_json", "length_chart"):  # output paths checked before any work (issue 12)
            if opts[key] is not None:
                opts[key] = writable_file(key, opts[key])
        sc = build_scenario(kwargs["scenario_args"], kwargs["scenario_file"])
        r = run_dataset(opts, sc)
        for line in summary_lines(r):
            err.print(line, highlight=False, soft_wrap=True)
        _outputs(opts, r, sc)
        # the peak micro-batch at the scenario's size; fit and plan, which vary the size, take each size's own from the
        # report (DatasetReport.seq_len_at: a padding-free row grows with its samples, a padded one does not)
        seq = r.peak_seq_len
        # a command that takes the report at its peak micro-batch (estimate) states the spread in its own result
        states_spread = wants_report and not per_row
        for line in _memory_lines(sc, seq, r.typical_seq_len, None if states_spread else r):
            err.print(line, highlight=False, soft_wrap=True)
        kwargs["scenario_args"] = {**kwargs["scenario_args"], "seq_len": seq}
        return func(**kwargs, **({"dataset_report": r} if wants_report else {}))

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__signature__ = sig.replace(parameters=own + extra)  # type: ignore[attr-defined]
    return wrapper
