"""A History (imbalance streaks, since when the cluster is observed) read from a JSON or YAML
file, for offline what-ifs with ``plan --history``; live rounds read the status store instead.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from reconciler.errors import ConfigError
from reconciler.model.history import History


def load_history(path: Path) -> History:
    """The History in ``path``; ``ConfigError`` names the field or the syntax problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(
            f"cannot read history {path}: {err.strerror}", hint="check the --history path"
        ) from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(
            f"history {path} is not JSON or YAML: {err}", hint="fix or regenerate the file"
        ) from err
    if isinstance(data, dict) and "moves" in data:
        raise ConfigError(
            f"history {path} lists 'moves': past moves are no longer read from a history file",
            hint="cooldown is read from each VM's domain metadata (observe shows it); keep "
            "only apiVersion, kind: History and imbalanceRounds",
        )
    try:
        return History.model_validate(data or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise ConfigError(
            f"history {path} is not a History: {where}: {first['msg']}",
            hint="a History has apiVersion, kind: History, imbalanceRounds and observedSince",
        ) from err
