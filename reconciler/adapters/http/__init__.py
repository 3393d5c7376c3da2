"""The HTTP endpoints reconciler run serves: /metrics, /healthz, /webhook."""
