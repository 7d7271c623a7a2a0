"""Procedural optimizers over the declarative optimizer's built-in functions: the yardsticks of the
benchmarks and further test oracles."""

from .bottomup import BottomUpOptimizer
from .incremental import IncrementalTopDownOptimizer
from .incremental_bottomup import IncrementalBottomUpOptimizer
from .topdown import TopDownOptimizer

__all__ = ["BottomUpOptimizer", "IncrementalBottomUpOptimizer", "IncrementalTopDownOptimizer", "TopDownOptimizer"]
