"""Example queries, simulation scenarios and cluster files, installed as package data.

Find them with ``importlib.resources.files("replicast.examples")``: the same call works from a
checkout (editable install) and from a wheel.
"""
