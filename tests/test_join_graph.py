"""Enumerating a join graph: connected sub-expressions and their splits into two connected halves,
and the limit that refuses a space too large to hold."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.optimizer.subgraphs import TooMany, ccp_pairs, connected_sets


@st.composite
def graphs(draw):
    """A connected graph of 1 to 9 vertices: a random spanning tree plus random extra edges."""
    n = draw(st.integers(1, 9))
    adjacency = [0] * n
    edges = [(draw(st.integers(0, i - 1)), i) for i in range(1, n)]
    if n > 1:
        edges += draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    for i, j in edges:
        if i != j:
            adjacency[i] |= 1 << j
            adjacency[j] |= 1 << i
    return adjacency


def is_connected(adjacency, mask):
    seen = frontier = mask & -mask
    while frontier:
        low = frontier & -frontier
        frontier ^= low
        reach = adjacency[low.bit_length() - 1] & mask & ~seen
        seen |= reach
        frontier |= reach
    return seen == mask


@given(graphs())
def test_connected_sets_are_exactly_the_connected_subsets(adjacency):
    everything = range(1, 1 << len(adjacency))
    assert connected_sets(adjacency) == [m for m in everything if is_connected(adjacency, m)]


@given(graphs())
def test_each_split_into_two_connected_halves_is_listed_once(adjacency):
    expected = set()
    for union in range(1, 1 << len(adjacency)):
        if not is_connected(adjacency, union):
            continue
        sub = (union - 1) & union
        while sub:
            rest = union ^ sub
            if sub & -sub < rest & -rest and is_connected(adjacency, sub) and is_connected(adjacency, rest):
                expected.add((sub, rest))
            sub = (sub - 1) & union
    pairs = ccp_pairs(adjacency)
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == expected


def chain(n):
    adjacency = [0] * n
    for i in range(n - 1):
        adjacency[i] |= 1 << (i + 1)
        adjacency[i + 1] |= 1 << i
    return adjacency


def test_a_thirty_relation_chain_has_its_closed_form_counts():
    # A chain of n has n(n+1)/2 connected sets and (n^3 - n)/6 splits; 2^30 subsets are never visited.
    assert len(connected_sets(chain(30))) == 465
    assert len(ccp_pairs(chain(30))) == 4495


def test_enumeration_stops_at_the_limit():
    with pytest.raises(TooMany):
        ccp_pairs(chain(30), limit=4494)
    assert len(ccp_pairs(chain(30), limit=4495)) == 4495


def clique(n):
    catalog = reopt.Catalog.from_dict({"tables": {"t": {"rows": 100, "columns": {"id": {"ndv": 100}}}}})
    builder = reopt.Query.builder()
    for i in range(n):
        builder.table("t", f"t{i}")
    for i in range(n):
        for j in range(i + 1, n):
            builder.join(f"t{i}.id", f"t{j}.id")
    return builder.build(), catalog


def test_a_query_over_the_pair_limit_is_refused_with_its_size_and_the_limit():
    query, catalog = clique(10)  # 28,501 splits
    with pytest.raises(reopt.QueryTooLargeError, match=r"10 relations .* more than 1,000 .*max_join_pairs"):
        reopt.Optimizer(query, catalog, reopt.OptimizerConfig(max_join_pairs=1000))


def test_the_baselines_honour_the_same_limit():
    from reopt.baselines import TopDownOptimizer

    query, catalog = clique(10)
    with pytest.raises(reopt.QueryTooLargeError):
        TopDownOptimizer(query, catalog, reopt.OptimizerConfig(max_join_pairs=1000))


@pytest.mark.parametrize("limit", [0, -5, 2.5, True, "1000"])
def test_the_pair_limit_must_be_a_positive_int(limit):
    with pytest.raises(reopt.OptimizerError, match="max_join_pairs"):
        reopt.OptimizerConfig(max_join_pairs=limit)


def test_the_pair_limit_follows_the_pruning_design_unless_given():
    # the memo-based pruning holds about ten times as much a pair as the goal bound
    from reopt.optimizer.optimizer import DEFAULT_MAX_JOIN_PAIRS, MEMO_MAX_JOIN_PAIRS
    assert reopt.OptimizerConfig().max_join_pairs == DEFAULT_MAX_JOIN_PAIRS
    assert reopt.OptimizerConfig.setting("none").max_join_pairs == DEFAULT_MAX_JOIN_PAIRS
    assert reopt.OptimizerConfig.setting("all").max_join_pairs == MEMO_MAX_JOIN_PAIRS < DEFAULT_MAX_JOIN_PAIRS
    assert reopt.OptimizerConfig(goal_bound=False, aggregate_selection=True).max_join_pairs == MEMO_MAX_JOIN_PAIRS
    assert reopt.OptimizerConfig(goal_bound=False, aggregate_selection=True, max_join_pairs=None).max_join_pairs is None


def test_a_memo_based_setting_refuses_a_query_the_goal_bound_takes():
    query, catalog = clique(10)  # 28,501 splits
    reopt.Optimizer(query, catalog)  # within the goal bound's limit
    with pytest.raises(reopt.QueryTooLargeError, match=r"more than 25,000"):
        reopt.Optimizer(query, catalog, reopt.OptimizerConfig.setting("all"))


def test_a_thirty_relation_star_is_refused_or_approximated_without_holding_its_subsets():
    # its hub has 2^29 sets of neighbours; counting the splits must stop at the limit, not list them
    # first (which took all the memory there was): run under a 2 GB address-space limit
    code = """
import resource, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import reopt
from reopt.optimizer.workloads import generated
query, catalog = generated("star", 30, seed=3)
try:
    reopt.Optimizer(query, catalog)
except reopt.QueryTooLargeError:
    print("refused")
warnings.simplefilter("ignore")
plan = reopt.Optimizer(query, catalog, reopt.OptimizerConfig(beyond_limit="greedy")).optimize()
print(len(plan.query.aliases), "relations planned")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["refused", "30 relations planned"]


def test_a_query_of_more_relations_than_native_integers_hold_is_refused_there():
    from reopt.datalog import nativecore
    from reopt.optimizer.workloads import generated

    query, catalog = generated("chain", 64, seed=1)  # its whole expression is 2^64 - 1
    if nativecore.available():
        with pytest.raises(reopt.QueryTooLargeError, match=r"64 relations; .* at most 63 relations: use "
                                                          r"OptimizerConfig\(backend='python'\)"):
            reopt.Optimizer(query, catalog, reopt.OptimizerConfig(backend="native"))
    assert not reopt.Optimizer(query, catalog, reopt.OptimizerConfig(backend="python")).approximate
