"""delayq: a Python client for the delayq delay queue (standard library only).

    from delayq import Client
    c = Client("http://127.0.0.1:8080")
    c.add("order", {"order": 42}, id="order-42", delay=1800, ttr=60)
    job = c.pop("order", timeout=20)
    if job:
        ...
        c.finish(job.id)
"""

import logging

from .client import DEFAULT_URL, Client, Job, JobInfo, Result
from .errors import (BadRequest, ClientError, Conflict, ConnectFailed, ConnectionLost,
                     DelayqError, NotFound, ServerError, Timeout, TooLarge, Unauthorized,
                     Unavailable)
from .worker import DEFAULT_BACKOFF, Worker

__version__ = "0.1.0"

# Quiet unless the application configures logging ("delayq.worker" logs
# each failed job and each failed poll).
logging.getLogger("delayq").addHandler(logging.NullHandler())

__all__ = [
    "Client", "Job", "JobInfo", "Result", "Worker", "DEFAULT_URL", "DEFAULT_BACKOFF",
    "DelayqError", "ClientError", "BadRequest", "Unauthorized", "NotFound", "Conflict",
    "TooLarge", "ServerError", "Unavailable", "Timeout", "ConnectFailed", "ConnectionLost",
    "__version__",
]
