"""workbench: a research and teaching workbench for latent feedback in transformers (LRT, FBT), each split into a
*mechanism* and a *schedule* on one backbone."""

from . import analysis, hooks, schedules, tasks
from ._version import __version__
from .checkpoint import load_checkpoint, save_checkpoint
from .config import ModelConfig
from .decode import generate
from .hooks import HookPoint, with_hooks
from .model import GPT, build_model
from .train import TrainResult, train
from .train_config import TrainConfig

# Imported on first use: matplotlib, ipywidgets and transformers are heavy, and most scripts need none.
_LAZY = ("plots", "widgets", "hf", "experiments", "evaluation", "stats", "diagrams", "exercises")
_LAZY_NAMES = {"LiveLossPlot": "widgets.live"}  # name -> module: a notebook-only callback, with the widgets


def __getattr__(name: str):
    if name in _LAZY or name in _LAZY_NAMES:
        import importlib

        module = importlib.import_module(f".{_LAZY_NAMES.get(name, name)}", __name__)
        return module if name in _LAZY else getattr(module, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")

__all__ = ["GPT", "HookPoint", "LiveLossPlot", "ModelConfig", "TrainConfig", "TrainResult", "analysis",
           "build_model", "generate", "hooks", "load_checkpoint", "save_checkpoint", "schedules", "tasks", "train",
           "with_hooks", "__version__"]
