"""What pruning needs of the cost model (docs/pruning.md, "What the cost model must satisfy"):
local costs are never negative, so a plan costs at least each of its inputs (the goal bound stops
exactly), and they never fall when rows, widths or cost factors grow (a bound on how far a plan's
cost falls follows from how far its statistics fell)."""

from hypothesis import given
from hypothesis import strategies as st

from reopt.optimizer.cost import CostModel
from reopt.optimizer.plan_space import BROADCAST_HASH_JOIN, EXCHANGE, SHUFFLED_HASH_JOIN, SORT, SORT_MERGE_JOIN

COSTS = CostModel()
rows = st.floats(min_value=1.0, max_value=1e12)
width = st.floats(min_value=1e-3, max_value=1e4)
factor = st.floats(min_value=1 / 64, max_value=64)
growth = st.floats(min_value=1.0, max_value=1e3)
joins = st.sampled_from([BROADCAST_HASH_JOIN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN])
relations = st.integers(min_value=1, max_value=17)


def join_cost(op, args, right_relations):
    out = COSTS.join(op, *args, right_relations=right_relations)
    return out[0][0] if out else None


@given(joins, rows, width, rows, width, rows, factor, relations)
def test_a_join_s_local_cost_is_never_negative(op, lrows, lwidth, rrows, rwidth, out, f, n):
    cost = join_cost(op, (lrows, lwidth, rrows, rwidth, out, f), n)
    assert cost is None or cost >= 0


@given(joins, rows, width, rows, width, rows, factor, relations, st.integers(min_value=0, max_value=5), growth)
def test_a_join_s_local_cost_never_falls_when_an_input_grows(op, lrows, lwidth, rrows, rwidth, out, f, n, which, by):
    args = [lrows, lwidth, rrows, rwidth, out, f]
    before = join_cost(op, tuple(args), n)
    args[which] *= by
    after = join_cost(op, tuple(args), n)
    if before is not None and after is not None:
        assert after >= before
    # a broadcast that no longer fits becomes impossible; one that did not fit never starts fitting
    assert not (before is None and after is not None)


@given(st.sampled_from([EXCHANGE, SORT]), rows, width, factor, growth, growth, growth)
def test_an_enforcer_s_cost_is_never_negative_and_never_falls_when_its_input_grows(op, n, w, f, more, wider, dearer):
    before = COSTS.unary(op, n, w, f)[0][0]
    assert 0 <= before <= COSTS.unary(op, n * more, w * wider, f * dearer)[0][0]


@given(rows, width, st.floats(min_value=0.0, max_value=1e15), factor, growth, growth)
def test_a_scan_s_cost_is_never_negative_and_never_falls_when_it_reads_more(n, w, scanned, f, more, bigger):
    before = COSTS.scan(n, w, scanned, f)[0][0]
    assert 0 <= before <= COSTS.scan(n * more, w, scanned * bigger, f)[0][0]
