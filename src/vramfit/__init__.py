"""vramfit: how much GPU memory will this fine-tuning run need, and which GPU should I rent?

Light core: importing vramfit needs no torch. ``vramfit.estimate(...)`` is instant.
"""

from vramfit.config_import import from_config
from vramfit.errors import ModelError, ScenarioError, VramfitError
from vramfit.estimate import estimate
from vramfit.estimate.result import Component, EstimateResult, Peak
from vramfit.scenario import Scenario, load_scenario_file, parse_scenario

__version__ = "0.1.0"

__all__ = [
    "estimate",
    "Scenario",
    "parse_scenario",
    "load_scenario_file",
    "from_config",
    "EstimateResult",
    "Component",
    "Peak",
    "VramfitError",
    "ScenarioError",
    "ModelError",
    "__version__",
]
