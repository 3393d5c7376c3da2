"""``reconciler simulate``: days of load replayed through the same decision ``run`` makes.

- :mod:`.trace` - the load replayed (pure data): VMs and their demand per step;
- :mod:`.power` - watts from a host kind's power curve;
- :mod:`.world` - the simulated cluster: where each VM runs, its records, the snapshot a round
  observes (its load over the policy's window, as a load source gives it);
- :mod:`.moves` - a round's moves carried out in time: admission, parallel limits, each
  move's duration from the busy-guest model, aborts;
- :mod:`.meter` - what the hosts and VMs went through, step by step: overload, energy,
  performance lost to migrations;
- :mod:`.rollouts` - the cluster's rollouts carried on in simulated time, as ``run`` carries them;
- :mod:`.replay` - the loop: every interval ``core.next_actions`` decides, as in ``run``.
"""
