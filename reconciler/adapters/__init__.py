"""The only code that touches the world: libvirt, git, forges, the local lab."""
