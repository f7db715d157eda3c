"""The unreachable-node records (hpc_hangkit.rollcall.unreachable) are read as hostile files:
a planted symbolic link or a damaged record is skipped with a warning, never followed."""
import json
import os

from hpc_hangkit.rollcall import unreachable


def test_records_round_trip_and_the_earlier_since_wins(tmp_path):
    unreachable.write_unreachable(str(tmp_path), "hk3", 200.0, [16, 17, 18], "no answer in 10 s")
    hd = tmp_path / "hang_detector" / "unreachable"
    hd.mkdir(parents=True)
    (hd / "hk3.json").write_text(json.dumps({"node": "hk3", "since": 150.0, "ranks": "16-18", "why": "x"}))
    got = unreachable.read_unreachable(str(tmp_path))
    assert got == [{"node": "hk3", "since": 150.0, "ranks": "16-18", "why": "x"}]
    unreachable.clear_unreachable(str(tmp_path), "hk3")
    assert not os.path.exists(tmp_path / "unreachable" / "hk3.json")


def test_a_planted_link_and_a_damaged_record_are_skipped_with_a_warning(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"node": "hk9", "since": 1.0, "ranks": "0-7", "why": "planted"}))
    d = tmp_path / "unreachable"
    d.mkdir()
    os.symlink(secret, d / "hk9.json")
    (d / "hk4.json").write_text('{"node": "hk4", "since": 1.0, "ranks": "7-x"}')
    unreachable.write_unreachable(str(tmp_path), "hk5", 5.0, [], "no answer")
    warns = []
    got = unreachable.read_unreachable(str(tmp_path), warns)
    assert [r["node"] for r in got] == ["hk5"]
    assert len(warns) == 2 and any(w.startswith("hk9.json") for w in warns) and any(w.startswith("hk4.json") for w in warns)
