"""The bundled model catalog and the resolution of a user's model string to an architecture.

``resolve_model`` tries, in order:

1. an exact catalog id or alias (case-insensitive);
2. ``generic:<size>`` (e.g. ``generic:7B``): a generic Llama-style model of that size;
3. an existing local path: a ``config.json`` file or a directory holding one (read offline);
   an existing path wins over the name guess below, a path-like string that does not exist
   is an error;
4. the catalog again, by name with release suffixes dropped (``-Instruct``, ``-chat``, ``-it``,
   ``-Int4``, ``-AWQ``, ``-GPTQ`` ...), which records a note;
5. the Hugging Face Hub, for ``org/name`` ids: ``config.json`` only (never model code, never
   ``trust_remote_code``), cached by huggingface_hub's own cache; huggingface_hub is optional.

Anything else is a :class:`ModelError` that lists the closest catalog names.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from vramfit import limits
from vramfit.errors import ModelError, ScenarioError
from vramfit.models.generic import generic_config, parse_param_count
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.models.spec import ModelSpec
from vramfit.safe_input import load_json_text, path_kind, read_text_file, shown, user_path

ORIGINS = ("catalog", "config-file", "hub", "generic")

# Name tokens that mark a release of the same architecture (chat/instruct tuning, quantized
# weights, base/pretrained): dropped when matching a name against the catalog.
_RELEASE_TOKENS = frozenset({
    "instruct", "chat", "it", "pt", "base", "hf", "meta", "sft", "dpo", "rlhf", "int4", "int8",
    "awq", "gptq", "fp8", "bnb", "4bit", "8bit", "nf4",
})
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


@dataclass(frozen=True)
class ResolvedModel:
    """A model string resolved to an architecture."""

    id: str  # catalog id, Hub repo id, config path, or "generic-7B"
    spec: ModelSpec
    config: dict = field(compare=False, hash=False)  # the config.json dict the spec came from
    source: str = ""  # URL or path of that config.json
    origin: str = "catalog"  # one of ORIGINS
    notes: tuple[str, ...] = ()  # user-facing remarks on how the model was resolved
    requested: str = ""  # the string the user gave


@lru_cache(maxsize=1)
def load_catalog() -> tuple[dict[str, Any], ...]:
    """All catalog entries (``src/vramfit/data/models.json``), in file order. Do not mutate."""
    try:
        data = resources.files("vramfit").joinpath("data/models.json")
        text = data.read_text(encoding="utf-8")
    except (TypeError, AttributeError, OSError):  # e.g. vramfit imported as a namespace package
        text = (Path(__file__).resolve().parents[1] / "data" / "models.json").read_text("utf-8")
    return tuple(json.loads(text)["models"])


@lru_cache(maxsize=1)
def _index() -> dict[str, dict[str, Any]]:
    """Lower-cased id and alias -> entry."""
    index: dict[str, dict[str, Any]] = {}
    for entry in load_catalog():
        for name in (entry["id"], *entry.get("aliases", ())):
            index[name.lower()] = entry
    return index


def catalog_entry(model: str) -> dict[str, Any] | None:
    """The bundled catalog's entry for an id or alias (case-insensitive), else None; never reads a file or the Hub."""
    return _index().get(model.strip().lower()) if isinstance(model, str) else None


def search_models(query: str | list[str] | tuple[str, ...] = "") -> list[dict[str, Any]]:
    """Catalog entries where every word of ``query`` is in the id, an alias, display name or family.

    ``"qwen2.5 32b"`` (or ``["qwen2.5", "32b"]``) is the AND of its words, case-insensitive.
    """
    text = " ".join(query) if isinstance(query, (list, tuple)) else query
    words = text.lower().split()
    out = []
    for e in load_catalog():
        names = [s.lower() for s in (e["id"], e["display_name"], e["family"], *e.get("aliases", ()))]
        if all(any(w in s for s in names) for w in words):
            out.append(e)
    return out


def resolve_model(model: str) -> ResolvedModel:
    """Resolve a catalog id/alias, local config path, ``generic:<size>`` or Hub id."""
    if not isinstance(model, str) or not model.strip():
        raise ModelError("give a model id, alias, config.json path or generic:<size>")
    text = model.strip()

    entry = _index().get(text.lower())
    if entry is not None:
        notes = () if entry["id"].lower() == text.lower() else (
            f"{text} uses the architecture of catalog model {entry['id']}", *_prequantized_note(text),
        )
        return _from_entry(entry, text, notes)

    if text.lower().startswith("generic:"):
        return resolve_generic(text.split(":", 1)[1], requested=text)

    path = _model_path(text)
    if path is not None:
        return _from_path(path, text)
    if _looks_like_path(text):
        raise ModelError(f"no such file or directory: {text}")

    by_name = _match_by_name(text)
    if by_name is not None:
        note = (f"{text} is not in the catalog; using {by_name['id']}, the same model name without "
                "release suffixes (instruct/chat/quantized releases share the architecture)")
        return _from_entry(by_name, text, (note, *_prequantized_note(text)), _closest_name(by_name, text))

    if _HUB_ID.match(text) and len(text) <= limits.MAX_HUB_ID_CHARS:
        return _from_hub(text)
    raise ModelError(f"unknown model {shown(text)}{_suggest(text, fallback=True)}")


def resolve_generic(size: str | int, requested: str = "") -> ResolvedModel:
    """A generic Llama-style decoder of ``size`` parameters (see :mod:`vramfit.models.generic`)."""
    n = parse_param_count(size)
    config = generic_config(n)
    spec = spec_from_hf_config(config)
    label = f"generic-{_short(n)}"
    note = (f"{label}: generic Llama-style architecture ({spec.num_hidden_layers} layers, hidden "
            f"{spec.hidden_size}) with {spec.num_params:,} parameters, not a real model")
    return ResolvedModel(label, spec, config, "vramfit generic shape rule", "generic", (note,),
                         requested or str(size))


# ---------------------------------------------------------------------------------- helpers
@lru_cache(maxsize=256)
def catalog_spec(model_id: str) -> ModelSpec:
    """Specs of catalog entries never change at run time: parse each config once. An entry of a family read
    from transformers' modules carries that reading (``"spec"``, :mod:`vramfit.models.spec_data`; a test keeps it
    equal to the live reading), and it is used whether or not torch is installed: the catalog needs neither, gives
    the same answer everywhere, and listing it never imports torch and transformers (seconds, and bitsandbytes'
    import-time warnings on stderr)."""
    entry = _index()[model_id.lower()]
    if "spec" in entry:
        from vramfit.models.spec_data import spec_from_data

        return spec_from_data(entry["spec"])
    return spec_from_hf_config(entry["config"])


def alias_context(entry: dict[str, Any], name: str) -> int | None:
    """The context an alias's own config.json states where it differs from its entry's (``alias_context``, cited by
    ``alias_context_source``: the Qwen2.5 Instruct releases ship ``max_position_embeddings`` 32,768 beside the base
    models' 131,072), else None."""
    lowered = name.strip().lower()
    return next((n for a, n in entry.get("alias_context", {}).items() if a.lower() == lowered), None)


def _release_tokens(name: str) -> set[str]:
    return {t for t in name.lower().rsplit("/", 1)[-1].split("-") if t in _RELEASE_TOKENS}


def _closest_name(entry: dict[str, Any], text: str) -> str:
    """The entry's id or alias that a name matched without its release suffixes is closest to: the same name, sharing
    the most release tokens (``Qwen2.5-7B-Instruct-FP8`` -> ``Qwen/Qwen2.5-7B-Instruct``), fewest others on a tie."""
    target, wanted = _normalize(text), _release_tokens(text)
    names = [n for n in (entry["id"], *entry.get("aliases", ())) if _normalize(n) == target] or [entry["id"]]
    return max(names, key=lambda n: (len(_release_tokens(n) & wanted), -len(_release_tokens(n) - wanted)))


def _from_entry(entry: dict[str, Any], requested: str, notes: tuple[str, ...], matched: str = "") -> ResolvedModel:
    """``matched``: the catalog name a name-matched request stands for (its alias context applies)."""
    notes = notes + tuple(n for n in [entry.get("notes")] if n)
    spec, config = catalog_spec(entry["id"]), entry["config"]
    context = alias_context(entry, matched or requested)
    if context is not None:  # the alias's RoPE tables and trained context are its own (estimate/rope_v4.py, context.py)
        spec = replace(spec, max_position_embeddings=context)
        config = {**config, "max_position_embeddings": context}
    return ResolvedModel(entry["id"], spec, config, entry["source"], "catalog", notes, requested)


def _looks_like_path(text: str) -> bool:
    return (text.startswith(("/", "./", "../", "~", "\\")) or text.endswith(".json")
            or text.count("/") > 1 or "\\" in text or bool(re.match(r"^[A-Za-z]:", text)))


def _normalize(name: str) -> str:
    name = name.lower().rsplit("/", 1)[-1]
    return "-".join(t for t in name.split("-") if t and t not in _RELEASE_TOKENS)


def _match_by_name(text: str) -> dict[str, Any] | None:
    if not _NAME.match(text):
        return None
    org = text.lower().split("/", 1)[0] if "/" in text else None
    target = _normalize(text)
    if not target:
        return None
    found: dict[str, dict[str, Any]] = {}
    for name, entry in _index().items():
        if _normalize(name) == target:
            found.setdefault(entry["id"], entry)
    if len(found) > 1 and org:
        same_org = {i: e for i, e in found.items() if i.lower().startswith(org + "/")}
        found = same_org or found
    return next(iter(found.values())) if len(found) == 1 else None


#: The name tokens of a checkpoint quantized before training (Hub uploads such as TheBloke/Mistral-7B-v0.1-GPTQ,
#: Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8, TechxGenus/Meta-Llama-3-8B-Instruct-AWQ). The weights' own config.json then
#: holds a ``quantization_config``, which transformers' ``from_pretrained`` applies whatever the training config says
#: (LLaMA-Factory@ff6d4d1 src/llamafactory/model/model_utils/quantization.py ``configure_quantization``: the "ptq"
#: branch comes first and ``quantization_bit`` "will not affect" it); offline, the name is what vramfit can read.
#: FP8 and MXFP4 checkpoints are not here: LLaMA-Factory loads them de-quantized (``FineGrainedFP8Config(dequantize=
#: True)``, ``Mxfp4Config(dequantize=True)``), a 16-bit base.
_PTQ_TOKENS = ("gptq", "awq")


def prequantized(name: str) -> tuple[str, bool] | None:
    """(``gptq`` or ``awq``, whether 8-bit) a release name declares by its tokens (:data:`_PTQ_TOKENS`;
    ``int8``/``8bit`` mark an 8-bit one), else None."""
    tokens = set(re.split(r"[-_.]", str(name).rsplit("/", 1)[-1].lower()))
    kind = next((t for t in _PTQ_TOKENS if t in tokens), None)
    return None if kind is None else (kind, bool(tokens & {"int8", "8bit"}))


def _prequantized_note(text: str) -> tuple[str, ...]:
    """What a GPTQ or AWQ release's name tells (:func:`prequantized`): its config.json's quantization_config makes
    from_pretrained load the quantized weights, which the scenario's own method and quantize keys must say; an importer
    of a framework that loads them sets those keys itself (config_import/hf_common.py ``checkpoint_quantization``)."""
    found = prequantized(text)
    if found is None:
        return ()
    return (f"{text} is a {found[0].upper()} checkpoint by its name: a run that loads it trains on its quantized "
            "weights, which this estimate counts only as method and quantize say (4-bit GPTQ: method qlora, quantize gptq-int4; "
            "AWQ and 8-bit GPTQ are not modelled)",)


def _suggest(text: str, fallback: bool = False) -> str:
    names = {n: e["id"] for e in load_catalog() for n in (e["id"], *e.get("aliases", ()))}
    lowered = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(text.lower(), list(lowered), n=8, cutoff=0.5)
    short = {n.lower().rsplit("/", 1)[-1]: n for n in names}
    hits += difflib.get_close_matches(text.lower().rsplit("/", 1)[-1], list(short), n=8,
                                      cutoff=0.5)
    ids = list(dict.fromkeys(names[lowered.get(h) or short[h]] for h in hits))[:5]
    if not ids:
        return ("; not in the catalog (search it: `vramfit models WORDS`), and not a local config.json "
                "path or a Hub id (org/name)") if fallback else ""
    return f"; did you mean: {', '.join(ids)}?"


def release_of(model: str) -> str | None:
    """The catalog id a release name resolves to offline (:func:`resolve_model`'s step 4, the name without release
    suffixes), never through a file: None for a string that names an existing path or looks like one (the web API,
    which reads no server file, accepts these names as the CLI does)."""
    text = model.strip() if isinstance(model, str) else ""
    if not text or not _NAME.match(text) or _looks_like_path(text):
        return None
    try:
        if _model_path(text) is not None:
            return None
    except ModelError:
        return None
    entry = _match_by_name(text)
    return entry["id"] if entry is not None else None


def _model_path(text: str) -> Path | None:
    """The existing local path a model string names, or None; odd strings are one ModelError."""
    try:
        path = user_path("model", text)
        return path if path_kind("model", path) != "missing" else None
    except ScenarioError as exc:
        raise ModelError(exc.message.removeprefix("model: ")) from None


def _read_config(path: Path, label: str) -> dict:
    """A config.json file through the bounded reader (size, UTF-8, JSON depth: vramfit.limits)."""
    try:
        data = load_json_text("model", read_text_file("model", path), label)
    except ScenarioError as exc:
        raise ModelError(exc.message.removeprefix("model: ")) from None
    if not isinstance(data, dict):
        raise ModelError(f"{label} is not a config.json: expected a JSON object")
    return data


def _spec_for(config: dict, label: str) -> ModelSpec:
    try:
        return spec_from_hf_config(config)
    except ModelError as exc:
        message = exc.message.removeprefix(f"{exc.key}: ")
        if exc.valid:
            message = message.removesuffix(f" (valid values: {', '.join(exc.valid)})")
        raise ModelError(f"{label}: {message}", valid=exc.valid) from exc


def quantization_notes(config: dict) -> tuple[str, ...]:
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = quant.get("quant_method", "unknown")
        return (f"config.json declares quantization_config (quant_method={method}); the "
                "architecture is read from it, the weight format is chosen separately",)
    return ()


def _from_path(path: Path, requested: str) -> ResolvedModel:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ModelError(f"directory {path} has no config.json" if path.is_dir() else
                         f"{path} is not a regular file (give a config.json file or a directory holding one)")
    config = _read_config(file, str(file))
    spec = _spec_for(config, str(file))
    return ResolvedModel(str(path), spec, config, str(file.resolve()), "config-file",
                         quantization_notes(config), requested)


def _from_hub(repo_id: str) -> ResolvedModel:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise ModelError(
            f"{repo_id!r} is not in the bundled catalog and huggingface_hub is not installed to "
            "fetch its config.json; install it (pip install huggingface_hub), or pass the path "
            f"of a local config.json{_suggest(repo_id)}"
        ) from exc
    try:
        # the cached copy first: instant, and works offline; then the Hub (which the cache keeps)
        local = hf_hub_download(repo_id=repo_id, filename="config.json", local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (or no usable cache): ask the Hub
        local = _download_with_deadline(repo_id, hf_hub_download)
    label = f"config.json of {repo_id}"
    config = _read_config(Path(local), label)
    spec = _spec_for(config, label)
    source = f"https://huggingface.co/{repo_id}/blob/main/config.json"
    return ResolvedModel(repo_id, spec, config, source, "hub", quantization_notes(config),
                         repo_id)


def _download_with_deadline(repo_id: str, download: Any) -> str:
    """config.json from the Hub within one overall deadline (:data:`vramfit.limits.HUB_DEADLINE_S`)
    for the reachability probe, huggingface_hub's retries and the download together. The download
    runs in a daemon thread, so a Hub that accepts the connection and never answers cannot hold
    the caller past the deadline."""
    import threading
    import time

    deadline = time.monotonic() + limits.HUB_DEADLINE_S
    if not _hub_reachable(min(3.0, limits.HUB_DEADLINE_S)):
        raise ModelError(_hub_error(repo_id, ConnectionError("hub unreachable")))
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["path"] = download(repo_id=repo_id, filename="config.json")
        except Exception as exc:  # noqa: BLE001 - reported below as one clear ModelError
            box["error"] = exc

    worker = threading.Thread(target=run, name="vramfit-hub", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise ModelError(f"the Hugging Face Hub did not answer for the config.json of {repo_id} within "
                         f"{limits.HUB_DEADLINE_S:g} s (HUB_DEADLINE_S); pass a local config.json path or a "
                         "catalog model")
    if "error" in box:
        raise ModelError(_hub_error(repo_id, box["error"])) from box["error"]
    return box["path"]


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """A quick TCP probe of the Hub endpoint, so that an offline machine gets its answer at once
    instead of after huggingface_hub's retries (about 23 s)."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _hub_error(repo_id: str, exc: Exception) -> str:
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    if "GatedRepoError" in kinds:
        return (f"{repo_id} is a gated repository on the Hugging Face Hub: accept its license on "
                "huggingface.co and log in (`hf auth login` or HF_TOKEN), or pass a local "
                "config.json path")
    if "RepositoryNotFoundError" in kinds:
        return (f"{repo_id} was not found on the Hugging Face Hub (or is private: log in with "
                f"`hf auth login` or HF_TOKEN){_suggest(repo_id)}")
    # (LocalEntryNotFoundError is an EntryNotFoundError: test it first)
    if kinds & {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError",
                "ConnectError", "TimeoutError", "Timeout", "ConnectTimeout", "TimeoutException"}:
        return (f"cannot fetch the config.json of {repo_id}: the Hugging Face Hub is unreachable "
                "(offline, or HF_HUB_OFFLINE=1) and it is not in the local huggingface_hub "
                f"cache; pass a local config.json path or a catalog model{_suggest(repo_id)}")
    if kinds & {"EntryNotFoundError", "RemoteEntryNotFoundError"}:
        return f"{repo_id} on the Hugging Face Hub has no config.json"
    return (f"cannot fetch the config.json of {repo_id} from the Hugging Face Hub: "
            f"{type(exc).__name__}: {shown(str(exc), 200)[1:-1]}")


def _short(n: int) -> str:
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)
