"""Hardware: devices, node layouts, fabrics, and clusters built from named presets or ASTRA-sim style dimensions."""
from .astra import Dimensions, build_astra_cluster
from .cluster import Cluster
from .fabrics import FABRIC_KINDS, build_fabric, fat_tree, rail_optimised, single_switch
from .model import DeviceSpec, Fabric, HardwareError, LinkSpec, NodeTemplate, Tuning, duplex
from .profile import Profile, is_profile, load_profile, write_profile
from .presets import OVERRIDES, PRESETS, Preset, build_cluster, describe_preset, get_preset, list_presets

__all__ = [
    "Cluster", "NodeTemplate", "Tuning", "Profile", "load_profile", "write_profile", "is_profile", "DeviceSpec", "LinkSpec", "Fabric", "HardwareError", "duplex",
    "build_cluster", "PRESETS", "Preset", "OVERRIDES", "list_presets", "describe_preset", "get_preset",
    "build_fabric", "rail_optimised", "fat_tree", "single_switch", "FABRIC_KINDS", "Dimensions", "build_astra_cluster",
]
