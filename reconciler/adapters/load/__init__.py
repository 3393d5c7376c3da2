"""Where the load over a window comes from (run's samples, Prometheus), put into observations."""
