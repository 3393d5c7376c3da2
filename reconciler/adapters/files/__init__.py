"""Local files: the status, snapshots, histories, edited cluster files, locks."""
