"""Cost weights files: what ``reopt calibrate`` writes is what every later session reads, and a file
that cannot be used is a typed error naming it, never a silent default."""

import json

import pytest

import reopt
from reopt.optimizer.weights_file import MEASURED, WeightsFileError, load_weights, save_weights


def test_saved_weights_load_back_exactly(tmp_path):
    weights = reopt.CostWeights(shuffle_row=4.25e-7, probe_row=1.5e-7, broadcast_job=0.25)
    path = save_weights(tmp_path / "weights.json", weights, [{"operator": "probe", "measured": 1.5e-7}])
    assert load_weights(path) == weights


def test_the_session_limits_are_not_saved_but_come_from_the_base(tmp_path):
    path = save_weights(tmp_path / "w.json", reopt.CostWeights(broadcast_threshold=1.0, shuffle_partitions=3))
    loaded = load_weights(path, reopt.CostWeights(shuffle_partitions=8))
    assert (loaded.broadcast_threshold, loaded.shuffle_partitions) == (reopt.CostWeights().broadcast_threshold, 8)
    assert "broadcast_threshold" not in json.loads(path.read_text())["weights"]


def test_a_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(WeightsFileError, match=r"no cost weights file at .*missing.json \(make one with: reopt calibrate"):
        load_weights(tmp_path / "missing.json")


@pytest.mark.parametrize("text, message", [
    ('{"format": "reopt-cost-weights", "version": 1, "weights": {', "cut short or not JSON"),
    ('{"format": "something-else"}', "not a reopt cost weights file"),
    ('{"format": "reopt-cost-weights", "version": 2, "weights": {}}', "holds version 2 of the cost weights file format"),
    ('{"format": "reopt-cost-weights", "version": 1, "weights": [1, 2]}', 'no "weights" object'),
])
def test_a_file_that_is_not_a_usable_weights_file_is_refused_by_name(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(WeightsFileError, match=message) as caught:
        load_weights(path)
    assert str(path) in str(caught.value)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00weights")
    with pytest.raises(WeightsFileError, match="not UTF-8"):
        load_weights(path)


def test_unknown_missing_and_non_positive_weights_are_named(tmp_path):
    path = save_weights(tmp_path / "w.json", reopt.CostWeights())
    data = json.loads(path.read_text())
    del data["weights"]["probe_row"]
    data["weights"]["teleport_row"] = 1.0
    path.write_text(json.dumps(data))
    with pytest.raises(WeightsFileError, match="unknown weights teleport_row; missing weights probe_row"):
        load_weights(path)
    data = json.loads(save_weights(tmp_path / "w.json", reopt.CostWeights()).read_text())
    data["weights"]["sort_row"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(WeightsFileError, match="weight sort_row must be a positive number, got -1"):
        load_weights(path)


def test_a_failed_save_leaves_the_previous_file_whole(tmp_path):
    path = save_weights(tmp_path / "w.json", reopt.CostWeights(probe_row=2e-7))
    before = path.read_text()
    (tmp_path / "blocker").write_text("a file, not a folder")
    with pytest.raises(WeightsFileError, match="cannot save cost weights"):
        save_weights(tmp_path / "blocker" / "w.json", reopt.CostWeights())
    assert path.read_text() == before and load_weights(path).probe_row == 2e-7


def test_every_measured_weight_is_a_weight_of_the_cost_model():
    assert set(MEASURED) < {name for name in vars(reopt.CostWeights())}
    assert {"broadcast_job", "shuffle_row", "probe_row"} <= set(MEASURED)
