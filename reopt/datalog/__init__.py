"""reopt.datalog: a general incremental datalog engine (no query-optimization knowledge here).

    program = Program.parse(text)            # or Program.load("rules/examples/shortest_paths.dl")
    engine = Engine(program, functions={...})   # backend="native" (default where built) or "python"
    engine.insert("edge", [(1, 2, 3.0)])
    engine.run()                             # derived deltas per relation
    engine.rows("dist")
"""

from .engine import BACKENDS, Engine, RelationDelta, default_backend
from .errors import DatalogError, DeltaError, EvaluationError, Location, ParseError, ProgramError
from .program import Program
from .stats import RelationStats, Stats

__all__ = [
    "Program",
    "Engine",
    "BACKENDS",
    "default_backend",
    "RelationDelta",
    "RelationStats",
    "Stats",
    "DatalogError",
    "ParseError",
    "ProgramError",
    "DeltaError",
    "EvaluationError",
    "Location",
]
