"""libvirt: connections, observation, migration, domain records."""
