"""git: the state repository, its runner, the lease ref, recorded observations."""
