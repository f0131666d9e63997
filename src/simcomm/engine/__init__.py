"""The discrete-event engine: flows on links, device queues, and the recorded timeline."""
from .maxmin import max_min_rates
from .network import FlowNetwork, Transfer
from .resources import DeviceQueue, copy_bytes, reduction_bytes
from .sim import CountingEnvironment, Simulation
from .trace import Activity, Recorder

__all__ = ["Activity", "CountingEnvironment", "DeviceQueue", "FlowNetwork", "Recorder", "Simulation", "Transfer",
           "copy_bytes", "max_min_rates", "reduction_bytes"]
