"""Load traces read from files for ``reconciler simulate``: a folder in the PlanetLab format
as published with CloudSim, and a CSV of ``time,vm,cpu[,memory,dirty]``."""

from reconciler.adapters.traces.read import read_csv, read_planetlab

__all__ = ["read_csv", "read_planetlab"]
