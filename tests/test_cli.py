"""The command line: explain, eval, and the demo's machine-readable summary."""

import io
import json
import subprocess
import sys

import pytest

from reopt import Catalog, Optimizer
from reopt.cli import WORKLOAD_NAMES, main
from reopt.optimizer.workloads import TPCH

from .conftest import EXAMPLES, ROOT


def test_explain_prints_the_plan_tree_and_join_order(capsys):
    assert main(["explain", str(ROOT / "reopt" / "queries" / "q5.sql"), "--tpch", "1"]) == 0
    out = capsys.readouterr().out
    assert "scan region" in out and "join order: " in out and "cost: " in out


def test_explain_with_statistics_from_json(tmp_path, capsys):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"tables": {"a": {"rows": 10, "columns": {"x": {"ndv": 5}}},
                                            "b": {"rows": 99, "columns": {"x": {"ndv": 9}}}}}))
    query = tmp_path / "q.sql"
    query.write_text("select * from a, b where a.x = b.x")
    assert main(["explain", str(query), "--stats", str(stats)]) == 0
    assert "scan a" in capsys.readouterr().out


def test_explain_reports_an_unknown_table_as_an_error(tmp_path, capsys):
    query = tmp_path / "q.sql"
    query.write_text("select * from nope")
    assert main(["explain", str(query)]) == 2
    assert "unknown table 'nope'" in capsys.readouterr().err


def test_explain_reads_the_query_from_standard_input_given_a_dash(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("select * from region r, nation n where r.r_regionkey = n.n_regionkey"))
    assert main(["explain", "-"]) == 0
    assert "join order: (n BHJ r)" in capsys.readouterr().out


def test_a_query_given_in_place_of_a_file_is_refused_with_a_hint(capsys):
    assert main(["explain", "select * from region"]) == 2
    assert "cannot read query file select * from region: No such file or directory (give a file, or - to read " \
           "standard input)" in capsys.readouterr().err


def test_explain_reads_a_bundled_query_by_name_where_no_such_file_exists(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "q8join", "--format", "json"]) == 0
    plan = Optimizer.from_sql(TPCH["Q8Join"], Catalog.tpch(1)).optimize()
    assert json.loads(capsys.readouterr().out) == plan.to_dict()


def test_a_file_named_like_a_bundled_query_is_read_as_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Q5").write_text("select * from region r, nation n where r.r_regionkey = n.n_regionkey")
    assert main(["explain", "Q5"]) == 0
    assert "join order: (n BHJ r)" in capsys.readouterr().out


def test_a_missing_query_file_is_refused_naming_the_bundled_queries(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "Q7"]) == 2
    assert capsys.readouterr().err == ("error: no query file Q7: give a file, - to read standard input, or a bundled "
                                       "query (Q3, Q5, Q8, Q9, Q10, Q8Join)\n")


def test_unreadable_standard_input_is_an_error_not_a_traceback(capsys):
    # pytest's captured standard input refuses to be read, as a closed one would
    assert main(["explain", "-"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read query file from standard input: ")


def test_eval_reads_facts_from_standard_input_given_a_dash(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"edge": [[1, 2]]})))
    assert main(["eval", str(EXAMPLES / "transitive_closure.dl"), "--facts", "-"]) == 0
    assert capsys.readouterr().out.split() == ["path(1,", "2)"]


def clique_query(tmp_path, n):
    """A query joining n tables on one key, every pair of them: 12 are over the default limit."""
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"tables": {f"t{i}": {"rows": 1000 * (i + 1), "columns": {"id": {"ndv": 500}}}
                                            for i in range(n)}}))
    query = tmp_path / "q.sql"
    pairs = [f"t{i}.id = t{j}.id" for i in range(n) for j in range(i + 1, n)]
    query.write_text(f"select * from {', '.join(f't{i}' for i in range(n))} where {' and '.join(pairs)}")
    return str(query), str(stats)


def test_explain_refuses_a_query_over_the_limit_and_names_the_way_to_plan_it(tmp_path, capsys):
    query, stats = clique_query(tmp_path, 12)
    assert main(["explain", query, "--stats", stats]) == 2
    err = capsys.readouterr().err
    assert "more than 250,000 connected pairs" in err and err.rstrip().endswith("reopt explain --beyond-limit greedy")


def test_explain_plans_a_query_over_the_limit_approximately_when_asked_and_says_so(tmp_path, capsys):
    query, stats = clique_query(tmp_path, 12)
    assert main(["explain", query, "--stats", stats, "--beyond-limit", "greedy"]) == 0
    out, err = capsys.readouterr()
    assert "join order: " in out
    assert err.startswith("warning: the query joins 12 relations") and "approximate" in err


def test_eval_prints_derived_rows(tmp_path, capsys):
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"edge": [[1, 2], [2, 3]]}))
    assert main(["eval", str(EXAMPLES / "transitive_closure.dl"), "--facts", str(facts)]) == 0
    assert capsys.readouterr().out.split() == ["path(1,", "2)", "path(1,", "3)", "path(2,", "3)"]


def test_eval_reports_rule_errors_with_location(tmp_path, capsys):
    rules = tmp_path / "bad.dl"
    rules.write_text("p(x) :- q(x).\n")
    assert main(["eval", str(rules)]) == 2
    assert "bad.dl:1:9" in capsys.readouterr().err


def test_engine_demo_ends_with_a_summary_line(capsys):
    assert main(["engine-demo", "--edges", "300", "--updates", "3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("summary: edges=300 ")


def test_explain_as_json_is_the_plan_as_data(capsys):
    assert main(["explain", str(ROOT / "reopt" / "queries" / "q3.sql"), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["root"]["operator"].endswith("join")
    assert sorted(plan["root"]["relations"]) == ["customer", "lineitem", "orders"]
    assert plan["cost"] > 0 and plan["cost_unit"].startswith("core-s")


def test_explain_as_dot_draws_one_box_per_operator(capsys):
    assert main(["explain", str(ROOT / "reopt" / "queries" / "q3.sql"), "--format", "dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph plan {") and out.rstrip().endswith("}")
    assert out.count("->") == out.count("[label=") - 1  # a tree: one edge fewer than nodes


def test_explain_of_a_file_not_in_utf8_is_an_error(tmp_path, capsys):
    query = tmp_path / "q.sql"
    query.write_bytes(b"select * from \xff")
    assert main(["explain", str(query)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_engine_demo_with_fewer_edges_than_its_default_nodes_finishes(capsys):
    assert main(["engine-demo", "--edges", "3", "--updates", "2"]) == 0
    assert "summary: edges=3" in capsys.readouterr().out


def test_engine_demo_refuses_a_graph_without_edges(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["engine-demo", "--edges", "0"])
    assert stopped.value.code == 2
    assert "--edges: expected at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("option, value", [("--batches", "-3"), ("--rows", "0"), ("--keys", "many"),
                                           ("--sample-rows", "-1")])
def test_the_demo_checks_its_counts_before_spark_starts(capsys, option, value):
    with pytest.raises(SystemExit) as stopped:
        main(["demo", option, value])
    assert stopped.value.code == 2
    assert f"argument {option}: expected" in capsys.readouterr().err


SAMPLED_DEMO = "snowflake"  # the workload whose demo run also plans each batch from a sample


@pytest.mark.parametrize("workload", WORKLOAD_NAMES)
def test_demo_compares_three_runs_draws_them_and_ends_with_its_summary_line(tmp_path, workload):
    """The main job, small, in its own process (it stops its Spark session when done)."""
    sampling = ["--sample-rows", "500"] if workload == SAMPLED_DEMO else []
    done = subprocess.run([sys.executable, "-m", "reopt", "demo", "--workload", workload, "--batches", "3",
                           "--rows", "20000", "--keys", "5000", *sampling],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("from a sample of its first 500 rows" in done.stdout) == bool(sampling)
    lines = done.stdout.strip().splitlines()
    assert f"Workload {workload}: " in done.stdout
    assert "results identical batch by batch: yes" in done.stdout
    assert (tmp_path / f"reopt-demo-{workload}.png").read_bytes().startswith(b"\x89PNG")
    fields = dict(part.split("=") for part in lines[-1].removeprefix("summary: ").split())
    assert list(fields) == ["batches", "plan_changes", "adaptive_s", "static_s", "speedup", "reopt_share", "aqe_s",
                            "speedup_vs_aqe"]
    assert fields["batches"] == "3"


def test_the_demo_offers_every_workload_the_library_has():
    from reopt.spark.drift import WORKLOADS

    assert WORKLOAD_NAMES == tuple(WORKLOADS)


def test_explain_with_a_delta_shows_both_plans_and_why_the_plan_changed(tmp_path, capsys):
    delta = tmp_path / "delta.json"
    delta.write_text(json.dumps([{"table": "orders", "rows": 3e7}, {"cardinality": ["customer", "orders"], "rows": 4e8}]))
    assert main(["explain", "q5", "--delta", str(delta)]) == 0
    out = capsys.readouterr().out
    assert out.index("before the delta:") < out.index("after the delta:") < out.index("delta: table orders rows=3e+07")
    assert "estimate {customer, orders} 227,651 -> 400,000,000 rows" in out
    assert "previous plan: " in out and "new plan: " in out


def test_explain_with_a_delta_as_json_holds_the_change(tmp_path, capsys):
    delta = tmp_path / "delta.json"
    delta.write_text(json.dumps([{"cost_factor": "broadcast_hash_join", "value": 50}]))
    assert main(["explain", "q5", "--delta", str(delta), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["before"]["key"] != shown["after"]["key"]
    assert shown["change"]["changed"] is True


@pytest.mark.parametrize("content, message", [
    ('{"table": "orders"}', "a delta is a list of changes"),
    ('[{"tabel": "orders", "rows": 5}]', 'change 1 of the delta must be one of {"table": NAME'),
    ('[{"table": "orders", "rows": 5},', "line 1, column 33"),
])
def test_explain_refuses_a_malformed_delta_file_naming_it(tmp_path, capsys, content, message):
    delta = tmp_path / "delta.json"
    delta.write_text(content)
    assert main(["explain", "q5", "--delta", str(delta)]) == 2
    err = capsys.readouterr().err
    assert "delta file" in err and "delta.json" in err and message in err


def test_explain_refuses_a_delta_naming_a_predicate_the_query_lacks(tmp_path, capsys):
    delta = tmp_path / "delta.json"
    delta.write_text(json.dumps([{"selectivity": "x = y", "value": 0.1}]))
    assert main(["explain", "q5", "--delta", str(delta)]) == 2
    assert "'x = y' is not a predicate of the query" in capsys.readouterr().err
