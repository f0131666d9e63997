"""`simcomm launch`: run an unmodified torch.distributed script on the simulator.

The script runs in this process, one thread per rank (simcomm's rank runtime). While a launch is active,
torch.distributed, torch.cuda, torch.multiprocessing, time and os.environ are patched so that, from a rank thread,
they behave as they would in that rank's own process on the simulated cluster; from any other thread they behave as
usual. Everything is restored when the launch ends. See docs/launch.md.
"""
from .context import RankContext, current_context
from .runner import LaunchResult, WorldRecord, launch, run_launched

__all__ = ["LaunchResult", "RankContext", "WorldRecord", "current_context", "launch", "run_launched"]
