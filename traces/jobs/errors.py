"""Turn a TraceError raised inside a Spark worker back into a TraceError on the driver.

Spark wraps a Python worker's exception in a ``PythonException`` whose text is the worker's whole
traceback; the user should see only our one-line message (file, line, reason).
"""

from __future__ import annotations

import contextlib
import re

from replicast.traces.errors import TraceError

_WORKER_TRACE_ERROR = re.compile(r"TraceError: (?P<message>[^\n]+)")


@contextlib.contextmanager
def worker_errors():
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except (PySparkException, Py4JJavaError) as error:
        match = _WORKER_TRACE_ERROR.search(str(error))
        if match:
            raise TraceError(match.group("message")) from None
        raise
