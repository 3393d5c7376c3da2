"""Hosts' power through their BMCs: Redfish, IPMI, Wake-on-LAN or a command.

``switches.PowerSwitches`` is the engine's ``PowerSwitch`` port; it picks the driver a host's
``power.driver`` names (``redfish``, ``ipmi``, ``wol``, ``command``). Every call is bounded by
the host's ``power.timeout``; credentials come from the reconciler's environment, by the names
``credentials.passEnv`` gives, and never reach a message, a log line, argv or a repr.
"""
