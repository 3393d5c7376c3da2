"""Pure data: the desired state (four YAML kinds), the observed snapshot, history and plans."""
