"""A spawn that cannot hang a test: a watchdog thread turns a hang into a failure."""
import simcomm
from adversarial import bounded

LIMIT_S = 20.0


def run(fn, nprocs=2, cluster="hgx-h100", args=(), limit=LIMIT_S, **kwargs):
    """simcomm.spawn on a watchdog thread; re-raises the run's error on the test's thread."""
    return bounded(lambda: simcomm.spawn(fn, args=args, nprocs=nprocs, cluster=cluster, **kwargs), limit,
                   "simcomm.spawn")
