"""Model architectures: the bundled catalog, Hugging Face config.json reading, generic shapes."""

from vramfit.models.catalog import ResolvedModel, catalog_spec, load_catalog, resolve_model, search_models
from vramfit.models.generic import generic_spec, parse_param_count
from vramfit.models.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from vramfit.models.spec import Linear, ModelSpec

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Linear",
    "ModelSpec",
    "ResolvedModel",
    "catalog_spec",
    "generic_spec",
    "load_catalog",
    "parse_param_count",
    "resolve_model",
    "search_models",
    "spec_from_hf_config",
]
