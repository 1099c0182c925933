"""The shapes a latency plot can take (:mod:`experiments.latency` draws them), with their help
texts. Kept apart from the plotting code so that ``replicast --help`` and every command's parser
load without numpy or matplotlib, which the base install does not have (docs/install.md)."""

KINDS = {
    "ccdf": "P(latency > x) on log axes, as the paper's Fig. 4 (default)",
    "cdf": "P(latency <= x)",
    "over-time": "each record's latency against its arrival time",
}
