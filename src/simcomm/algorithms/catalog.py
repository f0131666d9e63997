"""Every algorithm simcomm knows, by collective kind. Adding one means writing its module (plans, prediction,
checks) and listing its object here."""
from __future__ import annotations

from ..errors import AlgorithmError
from .base import Algorithm
from .bruck import BRUCK
from .direct import BINOMIAL, DIRECT, DISSEMINATION
from .doubling import HALVING_DOUBLING, RECURSIVE_DOUBLING
from .hierarchical import HIERARCHICAL
from .nvls import NVLS
from .nvls_tree import NVLS_TREE
from ..vocab import KINDS
from .ring import RING
from .tree import TREE

EVERY: tuple[Algorithm, ...] = (RING, TREE, RECURSIVE_DOUBLING, HALVING_DOUBLING, HIERARCHICAL, NVLS, NVLS_TREE,
                                DIRECT, BRUCK, BINOMIAL, DISSEMINATION)
# kind -> name -> algorithm; every kind has at least one.
ALGORITHMS: dict[str, dict[str, Algorithm]] = {
    kind: {a.name: a for a in EVERY if a.supports(kind)} for kind in KINDS}


def algorithms_for(kind: str) -> list[str]:
    """Names of the algorithms that can run `kind`."""
    if kind not in ALGORITHMS:
        raise AlgorithmError(f"unknown collective {kind!r}; expected one of {', '.join(KINDS)}")
    return sorted(ALGORITHMS[kind])


def algorithm(kind: str, name: str) -> Algorithm:
    """The algorithm `name` for `kind`, or an AlgorithmError listing what exists."""
    available = ALGORITHMS.get(kind)
    if available is None:
        raise AlgorithmError(f"unknown collective {kind!r}; expected one of {', '.join(KINDS)}")
    if name not in available:
        raise AlgorithmError(f"algorithm {name!r} is not available for {kind}; "
                             f"expected one of {', '.join(sorted(available)) or '(none)'}")
    return available[name]
