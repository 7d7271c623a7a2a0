"""A CI-sized sample of the Join Order Benchmark (one query per size from 4 to 10 relations, as the
package ships them): every optimizer picks the same plan, and re-optimization equals a full
optimization of the changed statistics."""

import pytest

import reopt
from reopt.baselines import BottomUpOptimizer, TopDownOptimizer
from reopt.optimizer import parse_sql
from reopt.optimizer.workloads import job_catalog, job_sql

SAMPLE = ["3a", "1a", "32a", "10a", "14a", "13a", "20a"]  # 4, 5, 6, 7, 8, 9 and 10 relations


@pytest.fixture(scope="module")
def catalog():
    return job_catalog()


def job(name, catalog):
    return parse_sql(job_sql(name), catalog)


@pytest.mark.parametrize("name", SAMPLE)
def test_declarative_top_down_and_bottom_up_choose_the_same_plan(name, catalog):
    query = job(name, catalog)
    declarative = reopt.Optimizer(query, catalog).optimize()
    assert TopDownOptimizer(query, catalog).optimize() == declarative
    assert BottomUpOptimizer(query, catalog).optimize() == declarative


@pytest.mark.parametrize("name", SAMPLE)
def test_reoptimizing_a_job_query_equals_optimizing_the_changed_statistics(name, catalog):
    query = job(name, catalog)
    predicate = sorted(p.text for p in query.joins)[0]
    table = max((t for _, t in query.relations), key=lambda t: catalog.table(t).rows)
    optimizer = reopt.Optimizer(query, catalog)
    optimizer.optimize()
    for delta in (reopt.DeltaStats.selectivity(predicate, 1e-3),
                  reopt.DeltaStats.table(table, rows=catalog.table(table).rows * 8)):
        plan = optimizer.reoptimize(delta)
        assert plan == TopDownOptimizer(query, optimizer.catalog).optimize()


def test_a_job_query_is_estimated_as_if_its_redundant_equalities_were_not_written(catalog):
    from reopt.optimizer.estimate import Estimator

    query = job("26a", catalog)  # 17 equalities over 12 relations
    kept, equal = [], {}

    def find(c):
        while equal.get(c, c) != c:
            c = equal[c]
        return c

    for p in query.joins:
        a, b = find(p.left), find(p.right)
        if a != b:
            equal[a] = b
            kept.append(p)
    # Without its filters the join is large, so no estimate is rounded up to one row.
    written, reduced = reopt.Query(query.relations, query.joins), reopt.Query(query.relations, kept)
    assert len(kept) == 11
    rows = Estimator(written, catalog).rows(written.full)
    assert rows > 1e6
    assert Estimator(reduced, catalog).rows(reduced.full) == pytest.approx(rows)
