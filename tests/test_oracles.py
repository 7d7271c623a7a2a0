"""The engine agrees with independent oracles: pyDatalog for general programs, networkx for graphs."""

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reopt.datalog import Engine, Program

from .conftest import EXAMPLES
from .helpers import pydatalog_answers

pytestmark = pytest.mark.usefixtures("backend")

NODES = st.integers(min_value=0, max_value=7)
EDGES = st.sets(st.tuples(NODES, NODES), max_size=20)

TC_PYDATALOG = """
path(X, Y) <= edge(X, Y)
path(X, Z) <= path(X, Y) & edge(Y, Z)
"""
SG_PYDATALOG = """
sg(X, Y) <= parent(X, P) & parent(Y, P)
sg(X, Y) <= parent(X, XP) & sg(XP, YP) & parent(Y, YP)
"""


def closure(edges) -> set:
    """(x, y) where y is reachable from x over one or more edges (x itself only through a cycle)."""
    graph = nx.DiGraph(list(edges))
    return {(x, y) for x in graph for s in graph.successors(x) for y in nx.descendants(graph, s) | {s}}


@given(EDGES)
def test_transitive_closure_equals_pydatalog_and_networkx(edges):
    engine = Engine(Program.load(EXAMPLES / "transitive_closure.dl"))
    engine.insert("edge", edges)
    engine.run()
    assert engine.rows("path") == closure(edges)
    assert engine.rows("path") == pydatalog_answers({"edge": edges}, TC_PYDATALOG, "path(X, Y)")


@given(EDGES, st.lists(st.tuples(st.booleans(), st.tuples(NODES, NODES)), max_size=12))
def test_transitive_closure_under_insertions_and_deletions_equals_networkx(edges, steps):
    engine = Engine(Program.load(EXAMPLES / "transitive_closure.dl"))
    engine.insert("edge", edges)
    engine.run()
    current = set(edges)
    for insert, edge in steps:
        if insert and edge not in current:
            engine.insert("edge", [edge])
            current.add(edge)
        elif not insert and edge in current:
            engine.delete("edge", [edge])
            current.discard(edge)
        engine.run()
        assert engine.rows("path") == closure(current)


# Parent links go from a child to a larger node id: a genealogy has no cycles (and pyDatalog's
# resolution does not terminate in reasonable time on cyclic parent graphs).
PARENTS = st.sets(st.tuples(NODES, NODES).filter(lambda cp: cp[0] < cp[1]), max_size=14)


def same_generation(parents) -> set:
    """(x, y) sharing an ancestor exactly k >= 1 parent steps above both, from networkx's graph."""
    graph = nx.DiGraph(list(parents))
    pairs = set()
    for x in graph:
        for y in graph:
            level_x, level_y = {x}, {y}
            for _ in range(len(graph)):
                level_x = {p for n in level_x for p in graph.successors(n)}
                level_y = {p for n in level_y for p in graph.successors(n)}
                if not level_x or not level_y:
                    break
                if level_x & level_y:
                    pairs.add((x, y))
                    break
    return pairs


@given(PARENTS, st.sets(st.tuples(NODES, NODES), max_size=4))
def test_same_generation_equals_pydatalog_and_networkx_before_and_after_deletions(parents, removed):
    engine = Engine(Program.load(EXAMPLES / "same_generation.dl"))
    engine.insert("parent", parents)
    engine.run()
    assert engine.rows("sg") == pydatalog_answers({"parent": parents}, SG_PYDATALOG, "sg(X, Y)")
    assert engine.rows("sg") == same_generation(parents)
    gone = removed & parents
    engine.delete("parent", gone)
    engine.run()
    assert engine.rows("sg") == pydatalog_answers({"parent": parents - gone}, SG_PYDATALOG, "sg(X, Y)")
    assert engine.rows("sg") == same_generation(parents - gone)


def dijkstra(weights: dict, source: int) -> set:
    graph = nx.DiGraph()
    graph.add_node(source)
    graph.add_weighted_edges_from((x, y, w) for (x, y), w in weights.items())
    return set(nx.single_source_dijkstra_path_length(graph, source).items())


WEIGHTS = st.integers(min_value=1, max_value=20)
STEP = st.tuples(st.sampled_from(["insert", "delete", "raise", "lower"]), NODES, NODES, WEIGHTS)


@given(st.dictionaries(st.tuples(NODES, NODES), WEIGHTS, max_size=25), st.lists(STEP, max_size=15))
def test_shortest_paths_on_cyclic_graphs_track_dijkstra_under_every_kind_of_change(weights, steps):
    weights = {(x, y): w for (x, y), w in weights.items() if x != y}
    engine = Engine(Program.load(EXAMPLES / "shortest_paths.dl"))
    engine.insert("source", [(0,)])
    engine.insert("edge", [(x, y, w) for (x, y), w in weights.items()])
    engine.run()
    assert engine.rows("dist") == dijkstra(weights, 0)
    for kind, x, y, w in steps:
        if x == y:
            continue
        old = weights.get((x, y))
        if kind == "insert" and old is None:
            engine.insert("edge", [(x, y, w)])
            weights[(x, y)] = w
        elif old is None:
            continue
        elif kind == "delete":
            engine.delete("edge", [(x, y, old)])
            del weights[(x, y)]
        elif kind in ("raise", "lower"):
            new = old + w if kind == "raise" else max(1, old - w)
            engine.update("edge", old=(x, y, old), new=(x, y, new))
            weights[(x, y)] = new
        engine.run()
        assert engine.rows("dist") == dijkstra(weights, 0)
