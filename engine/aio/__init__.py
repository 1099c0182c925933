"""The asyncio driver of the node core: TCP between nodes, wall clock, MQTT, metrics (DESIGN.md §6)."""
