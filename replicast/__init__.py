"""replicast: wide-area replicated stream processing (Hwang, Çetintemel, Zdonik, ICDE 2008).

Everything installs under this one package (DESIGN.md §2). The repository keeps its top-level
folders, each installed as a subpackage through ``package_dir`` in ``setup.cfg``:

========================  =====================================================================
``replicast.operators``   pure stream operators, duplicate filters, sorters, the query DAG
``replicast.engine``      the pure node core and its asyncio driver, entry points, sinks, CLI
``replicast.placement``   cost model, Alg. 5 deployment, Alg. 6 garbage collection, revival
``replicast.simulator``   the SimPy driver of the same node and coordinator cores
``replicast.traces``      trace formats, PySpark jobs, the generator, the shipped Seattle trace
``replicast.experiments`` the paper's figures and tables as commands
``replicast.cluster``     cluster operations beside the node: local and remote clusters, WAN emulation
``replicast.examples``    the example queries, scenarios and cluster files (package data)
========================  =====================================================================

``docs/architecture.md`` says how the parts fit.
"""

__version__ = "0.2.0"

# The compiled per-message path is used only while it matches its sources (native_build.py).
from replicast import native_build as _native_build  # noqa: E402

_native_build.guard()
