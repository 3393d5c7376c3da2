"""Commands run on the reconciler's machine (fence agents), all through one runner."""
