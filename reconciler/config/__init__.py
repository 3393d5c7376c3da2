"""Reading a cluster folder: YAML with line numbers into models, and semantic findings."""
