"""gpumine: exact data mining on the GPU, with a CPU fallback that gives the same results."""

from .config import config_context, get_config, set_config

__version__ = "0.1.0"

__all__ = ["config_context", "get_config", "set_config", "__version__"]
