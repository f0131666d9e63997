"""One error tree: every exception class simcomm defines that a user can meet subclasses SimcommError, so the CLI
prints it without a traceback and `except SimcommError` catches everything simcomm raises on bad input."""
import importlib
import inspect
import pkgutil

import pytest

import simcomm
from simcomm.errors import SimcommError

# Classes that are exceptions in Python's sense but never reach a user as an error, and why.
NOT_ERRORS = {
    # a warning (warnings.warn), as torch.distributed warns about unmatched p2p calls; it is never raised
    "simcomm.distributed.p2p.UnmatchedP2PWarning",
    # unwinds a rank's thread when a run is aborted; the runtime catches it and raises the run's SimcommError
    "simcomm.distributed.runtime._Aborted",
    # a closed form that does not apply (the collective then runs stage by stage), and a stage it solves with
    # every rail: both caught inside algorithms/symmetric.py
    "simcomm.algorithms.symmetric.NotSymmetric",
    "simcomm.algorithms.symmetric.Overloaded",
    # a launched child process's sys.exit(N), carried out of its rank; the parent gets torch's ProcessExitedException
    # (or the Process its exit code) instead
    "simcomm.backends.launch.multiprocessing.ChildExit",
}


def _exception_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(simcomm.__path__, "simcomm."):
        if info.name == "simcomm.__main__":  # runs the CLI; defines nothing
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_simcomm_exception_is_a_simcomm_error():
    classes = _exception_classes()
    # the walk sees the whole package: errors.py and the subpackages' own errors
    assert {"simcomm.errors.HardwareError", "simcomm.errors.UnitError", "simcomm.scenario.loader.ScenarioError",
            "simcomm.backends.nccl_log.LogError", "simcomm.parallel.dims.LayoutError"} <= set(classes)
    outside = sorted(name for name, cls in classes.items()
                     if not issubclass(cls, SimcommError) and name not in NOT_ERRORS)
    assert outside == [], f"exception classes outside the SimcommError tree: {outside}"


def test_the_exceptions_left_out_exist_and_are_not_errors():
    classes = _exception_classes()
    assert NOT_ERRORS <= set(classes)  # a stale entry would hide nothing, but would mislead
    assert issubclass(classes["simcomm.distributed.p2p.UnmatchedP2PWarning"], Warning)
    assert not issubclass(classes["simcomm.distributed.runtime._Aborted"], Exception)  # `except Exception` skips it


@pytest.mark.parametrize("shape", [-1, (2, -3), (1.5,), "8"])
def test_size_only_with_a_bad_shape_raises_a_simcomm_error(shape):
    with pytest.raises(SimcommError, match="size_only"):
        simcomm.size_only(shape)
