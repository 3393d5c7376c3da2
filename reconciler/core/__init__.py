"""Pure logic: planning, scoring, feasibility. No I/O, clock, logging or unseeded randomness."""
