"""The setup of ``replicast experiment fig4 --paper-scale`` alone (docs/experiments.md, "The
month's setup"): the PlanetLab-like store of ``servers`` × ``days``, ``Prepared`` (servers), and
the ten placements as ``experiments/fig4_paper.run`` makes them; prints the CPU seconds and a
sha256 of the placements, so two checkouts' interpreters can be compared one after the other:

    python3 benchmarks/fig4_paper_setup.py 30 && /other/.venv/bin/python benchmarks/fig4_paper_setup.py 30
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from pathlib import Path


def main(days: int, servers: int = 100) -> None:
    import replicast
    from replicast.experiments import fig4_paper
    from replicast.simulator.run import Prepared
    from replicast.simulator.timing import deployed

    cpu = time.process_time()
    store = fig4_paper.month_store(servers, days)
    with tempfile.TemporaryDirectory() as folder:
        scenario = fig4_paper.paper_scenario(Path(folder), store.meta.name, servers, fig4_paper.APPS, days * 86400.0)
        prepared = Prepared(scenario, store)
        configs = [deployed(prepared, k, kind) for kind in fig4_paper.DEPLOYMENTS.values() for k in fig4_paper.KMAX]
    digest = hashlib.sha256(str([c.placement for c in configs]).encode()).hexdigest()[:16]
    with open("/proc/loadavg", encoding="ascii") as file:
        load = file.read().split()[0]
    print(f"{replicast.__file__}: setup {time.process_time() - cpu:.1f} CPU s for {days} d of {servers} servers, "
          f"placements sha256 {digest}, load {load}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
