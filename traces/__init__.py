"""Wide-area latency traces: the canonical format, the shipped real traces, PySpark jobs, a
calibrated synthetic generator and the replay store the simulator reads (DESIGN.md §9).

Modules:
  format     the canonical on-disk format (Parquet partitioned by day + nodes + meta.json)
  catalog    trace names (``seattle``, ``planetlab490``) -> directories
  netlatency the NetLatency text-matrix reader (Zhu et al., IEEE/ACM ToN 2017 data sets)
  store      ``TraceStore``: O(1) ``latency_ms(src, dst, t_us)`` lookups, loaded chunk by chunk
  calibrate  statistics of a trace and the generator parameters fitted from them
  synth      the synthetic generator, writing the canonical format in chunks
  jobs/      PySpark jobs (ingest, summary, resample, join-geo); session setup in jobs/session.py
  cli        ``replicast trace ...``
"""

from replicast.traces.errors import TraceError

__all__ = ["TraceError"]
