"""Pure, replica-consistent stream operators (paper §IV).

Rule (DESIGN.md §3): nothing in this package reads a clock, sleeps, opens a socket, or imports
asyncio, simpy, time or random.  Time enters as arguments; randomness as a ``random.Random``
passed in by a driver.
"""
