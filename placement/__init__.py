"""Replica management (§V): where replicas run, which to discard, which to bring back.

Pure, like the node core (DESIGN.md §3, §7): no clock, no I/O, randomness passed in.

  model        Network (servers, one-way latencies, capacity), Workload (query wiring, rates, loads,
               pinned entry points and applications), Deployment (replica hosts, live stream replicas)
  cost         §V-A: cost(S) = rate(S) · latency(S), cost(R), cost_s(in(o) ∪ out(o))
  coordinates  Vivaldi with height (HashiCorp Serf's constants), fitted from RTTs
  from_trace   a Network from a trace's RTT frames
  workload     a Workload estimated from a query file
  relaxation   non-replicated start by spring relaxation (Pietzuch et al., ICDE 2006)
  constraints  Alg. 5 lines 6-7: α and dmin
  deployment   Alg. 5 (min-cost) and the random baseline
  refine       single-replica moves after Alg. 5 (our addition)
  optimal      the exact optimum (scipy.optimize.milp / HiGHS), the yardstick
  utility      §V-B utilities from duplicate-filter rank weights
  gc           Alg. 6 garbage collection, dependents(S)
  revival      §V-C revival decisions
  decisions    Deploy / Remove / Connect / Disconnect: one per node control message
  reports, measurements, coordinator   the coordinator core: reports in, decisions out
  cli, draw    ``replicast place`` (cli.py is a driver and may use random)
"""
