"""Test-wide settings: Hypothesis profiles (``ci`` is used when the CI variable is set)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_collection_modifyitems(config, items):
    """Where the compiled per-message path is in use (replicast/native_build.py), the tests marked
    ``pure_python`` — they watch it by patching its classes, which compiled classes ignore or refuse
    — are left to tests/test_native_build.py, which runs them against the ``.py`` modules."""
    from replicast import native_build

    if not native_build.STATUS.native:
        return
    patched = [item for item in items if item.get_closest_marker("pure_python") is not None]
    if patched:
        config.hook.pytest_deselected(items=patched)
        items[:] = [item for item in items if item.get_closest_marker("pure_python") is None]
