"""``reopt calibrate`` on a real local Spark: it measures every operator the model prices, fits
positive weights, saves them whole, and every way a session picks weights reads the file."""

import json

import pytest

import reopt
from reopt.cli import main
from reopt.optimizer.weights_file import MEASURED, load_weights, save_weights
from reopt.spark import session_weights
from reopt.spark.calibrate import calibrate


@pytest.fixture(scope="module")
def calibration(spark):
    return calibrate(spark, rows=40_000, keys=4_000, repeat=2)


def test_calibration_measures_each_operator_the_model_prices(calibration):
    assert [f.operator for f in calibration.figures] == [
        "scan", "exchange", "broadcast build", "shuffled build", "probe", "sort", "sort and merge",
        "broadcast of a join result"]
    assert all(f.before > 0 and f.spread >= 0 for f in calibration.figures)
    assert calibration.about["events"] == 40_000 and calibration.about["repeat"] == 2


def test_calibrated_weights_are_positive_and_keep_the_session_limits(calibration):
    weights = calibration.weights
    assert all(getattr(weights, name) > 0 for name in MEASURED)
    defaults = reopt.CostWeights()
    assert (weights.broadcast_threshold, weights.shuffle_partitions, weights.hash_build_memory) == (
        defaults.broadcast_threshold, defaults.shuffle_partitions, defaults.hash_build_memory)


def test_calibration_leaves_the_session_s_adaptive_execution_as_it_found_it(spark, calibration):
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_session_weights_read_a_calibrated_file_given_or_named_by_the_session(spark, calibration, tmp_path):
    path = save_weights(tmp_path / "weights.json", calibration.weights)
    given = session_weights(spark, str(path))
    assert given.probe_row == calibration.weights.probe_row
    assert given.broadcast_threshold == session_weights(spark).broadcast_threshold  # the session's own limit
    spark.conf.set("spark.reopt.costWeights", str(path))
    try:
        assert session_weights(spark).shuffle_row == calibration.weights.shuffle_row
    finally:
        spark.conf.unset("spark.reopt.costWeights")
    assert session_weights(spark).shuffle_row == reopt.CostWeights().shuffle_row


def test_a_session_naming_a_missing_weights_file_is_a_typed_error(spark, tmp_path):
    spark.conf.set("spark.reopt.costWeights", str(tmp_path / "nowhere.json"))
    try:
        with pytest.raises(reopt.WeightsFileError, match="nowhere.json"):
            session_weights(spark)
    finally:
        spark.conf.unset("spark.reopt.costWeights")


def test_the_demo_refuses_a_weights_file_it_cannot_use_before_starting_spark(tmp_path, capsys):
    bad = tmp_path / "weights.json"
    bad.write_text(json.dumps({"format": "reopt-cost-weights", "version": 9}))
    assert main(["demo", "--weights", str(bad)]) == 2
    assert "holds version 9 of the cost weights file format" in capsys.readouterr().err


def test_the_saved_file_is_what_load_reads(calibration, tmp_path):
    path = save_weights(tmp_path / "w.json", calibration.weights, [f.to_dict() for f in calibration.figures],
                        calibration.about)
    assert load_weights(path) == calibration.weights
    assert [row["operator"] for row in json.loads(path.read_text())["fit"]][0] == "scan"
