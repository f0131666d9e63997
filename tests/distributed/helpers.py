"""A spawn that cannot hang a test: a watchdog thread turns a hang into a failure."""
import threading

import simcomm

LIMIT_S = 20.0


def run(fn, nprocs=2, cluster="hgx-h100", args=(), limit=LIMIT_S, **kwargs):
    """simcomm.spawn on a watchdog thread; re-raises the run's error on the test's thread."""
    box = {}

    def target():
        try:
            box["result"] = simcomm.spawn(fn, args=args, nprocs=nprocs, cluster=cluster, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"simcomm.spawn did not return within {limit} s"
    if "error" in box:
        raise box["error"]
    return box["result"]
