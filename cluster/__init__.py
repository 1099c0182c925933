"""Cluster operations beside the node: start, watch and stop local clusters (``replicast cluster``).

Process supervision (:mod:`cluster.processes`), up-front checks of a cluster file
(:mod:`cluster.preflight`), wide-area emulation with network namespaces and netem
(:mod:`cluster.netem`) or with user-space delay relays (:mod:`cluster.relay`).  The node
(``engine/``) never imports this package; this package reads the node's cluster file format
(:mod:`engine.cluster_config`) and starts ``replicast node`` processes.
"""
