"""HTTP: the endpoints reconciler run serves (/metrics, /healthz, /webhook), and the deadline
of one call to a server (``deadline``)."""
