"""The discrete-event engine: flows on links, device queues (compute slowed by the communication beside it), and the
recorded timeline."""
from .compute import SPREAD_MIX, ComputeQueue, Mix
from .maxmin import max_min_rates
from .network import FlowNetwork, Transfer
from .resources import DeviceQueue, reduction_bytes
from .sharing import IDLE_KERNEL, MEMORY_KERNEL, Kernel, attention_kernel, gemm_kernel
from .sim import CountingEnvironment, Simulation, when_all
from .trace import NO_TAGS, Activity, Recorder, resolve_detail

__all__ = ["IDLE_KERNEL", "MEMORY_KERNEL", "NO_TAGS", "SPREAD_MIX", "Activity", "ComputeQueue", "CountingEnvironment",
           "DeviceQueue", "FlowNetwork", "Kernel", "Mix", "Recorder", "Simulation", "Transfer", "attention_kernel",
           "gemm_kernel", "max_min_rates", "reduction_bytes", "resolve_detail", "when_all"]
