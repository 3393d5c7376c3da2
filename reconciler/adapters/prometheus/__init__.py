"""Prometheus's HTTP API: the load of the VMs and hosts over a window."""
