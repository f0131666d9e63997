"""Context parallelism: the sequence split over ranks with the causal load-balanced split (split.py) and ring
attention (ring_attention.py: the block maths; ring.py: passing key/value blocks around the ring)."""
from .ring_attention import RingAttention
from .split import load_balanced_positions

__all__ = ["RingAttention", "load_balanced_positions"]
