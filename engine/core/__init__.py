"""The pure node core (DESIGN.md §3, §6, §6a): no clock, socket or event loop; see :mod:`engine.core.node`."""
