"""``estimate --batch`` with a dataset: each line's estimate at the dataset's peak micro-batch, with ``reserved_spread``.

A line names its dataset with ``"dataset"``: a path, or an object of the ``--dataset`` options by their scenario-style
names (``{"path": "chat.jsonl", "tokenizer": "tok", "packing": "bfd"}``); ``--dataset`` and its options on the command
line apply to every line that names none. A line's result is exactly what ``vramfit estimate --dataset`` gives for it
(:func:`dataset_estimate`, the one definition both use): the estimate at the peak micro-batch's row length under the
line's own batch sizes and ``seq_len``, and the reserved figure's spread over random orders of the lengths
(:mod:`vramfit.dataset.spread`). The length pass runs once per dataset and batching policy, however many lines share it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.safe_input import shown

#: Options a batch line may give for its dataset (the ``--dataset`` options less the output files), with their types.
LINE_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "path": str, "tokenizer": str, "field": str, "split": str, "max_length": (int, str), "padding": str,
    "pad_to_multiple_of": int, "packing": str, "padding_free": bool, "group_by_length": bool, "sample": int,
    "chars_per_token": (int, float),
}
_PATHS = ("path", "tokenizer")
_KIND_NAMES = {str: "a string", int: "an integer", bool: "true or false", (int, str): "an integer or \"none\"",
               (int, float): "a number"}


def dataset_estimate(sc, report, run: Callable[[Any], Any]):
    """The result of ``estimate --dataset``: ``run`` (the estimate with its card verdicts) at the report's peak
    micro-batch length, with the reserved figure's spread over random orders of the report's lengths."""
    from vramfit.dataset.spread import with_reserved_spread

    return with_reserved_spread(run(sc.replace(seq_len=report.peak_seq_len)), report)


def line_options(value: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """The ``--dataset`` options of a batch line's ``"dataset"`` value (over the command line's ``defaults``)."""
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise ScenarioError("dataset", "must be a file path or an object of dataset options", list(LINE_OPTIONS))
    opts = {**defaults, "dataset_json": None, "length_chart": None}
    for key, v in value.items():
        kind = LINE_OPTIONS.get(key)
        if kind is None:
            raise ScenarioError(f"dataset.{shown(str(key))}", "unknown dataset option", list(LINE_OPTIONS))
        if v is not None and (not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool)):
            raise ScenarioError(f"dataset.{key}", f"must be {_KIND_NAMES[kind]}, got {type(v).__name__}")
        opts["dataset" if key == "path" else key] = Path(v) if key in _PATHS and v is not None else v
    if opts["dataset"] is None:
        raise ScenarioError("dataset.path", "is required (the dataset file or folder)")
    return opts


class BatchDatasets:
    """Runs batch lines, each with its dataset (its own ``"dataset"``, else the command line's ``--dataset`` options,
    ``given``); one length pass per dataset and batching policy."""

    def __init__(self, run: Callable[[Any], Any], given: dict[str, Any] | None):
        from vramfit.cli.dataset_opts import option_defaults

        self.run, self.given, self.defaults = run, given, given or option_defaults()
        self._reports: dict[tuple, Any] = {}

    def __call__(self, item: Any):
        from vramfit.scenario import parse_scenario

        if not isinstance(item, dict):
            return self.run(item)
        line = dict(item)
        named = line.pop("dataset", None)  # absent or null: the command line's dataset, if any
        opts = self.given if named is None else line_options(named, self.defaults)
        if opts is None:
            return self.run(line)
        sc = parse_scenario(line)
        return dataset_estimate(sc, self._report(opts, sc), self.run)

    def _report(self, opts: dict[str, Any], sc):
        from vramfit.cli.dataset_opts import policy_from, run_dataset

        key = (repr(sorted((k, str(v)) for k, v in opts.items())), policy_from(opts, sc))
        if key not in self._reports:
            self._reports[key] = run_dataset(opts, sc)
        return self._reports[key]
