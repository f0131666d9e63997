"""The discrete-event engine: flows on links, device queues, and the recorded timeline."""
from .maxmin import max_min_rates
from .network import FlowNetwork, Transfer
from .resources import DeviceQueue, reduction_bytes
from .sim import CountingEnvironment, Simulation
from .trace import NO_TAGS, Activity, Recorder, resolve_detail

__all__ = ["NO_TAGS", "Activity", "CountingEnvironment", "DeviceQueue", "FlowNetwork", "Recorder", "Simulation", "Transfer",
           "max_min_rates", "reduction_bytes", "resolve_detail"]
