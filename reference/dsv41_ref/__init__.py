"""dsv41_ref: reference DeepSeek-V4.1 text model in PyTorch (see ../README.md)."""
from .config import Config, load_config, config_from_dict
from .model import Model, Cache
from .io import load_model, save_model
