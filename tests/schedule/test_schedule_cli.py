"""``rammer schedule``."""

from __future__ import annotations

import json

from sched_util import zoo_graph

from rammer.cli import main
from rammer.schedule import Schedule, verify


def test_schedule_command_prints_both_policies_and_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "s.json", tmp_path / "g.png"
    code = main(["schedule", "--zoo", "lstm-tc-small", "--backend", "reference", "--vdevice", "v100",
                 "--json", str(out_json), "--plot", str(out_png)])
    text = capsys.readouterr().out
    assert code == 0
    assert "wavefront" in text and "op-by-op" in text and "speed-up" in text and "verified" in text
    data = json.loads(out_json.read_text())
    assert data["policy"] == "wavefront" and data["vdevice"]["num_veus"] == 80
    assert 0 < data["utilization"] <= 1 and data["makespan_us"] > 0 and data["barriers"] >= 0
    assert len(data["programs"]) == 80
    verify(Schedule.from_dict(data), zoo_graph("lstm-tc-small"))
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_command_with_another_policy_and_preset(capsys):
    assert main(["schedule", "--zoo", "alexnet-small", "--vdevice", "cpu", "--policy", "op-by-op"]) == 0
    text = capsys.readouterr().out
    assert "op-by-op" in text and "speed-up" not in text


def test_schedule_command_lists_presets_and_policies(capsys):
    assert main(["schedule", "--list"]) == 0
    text = capsys.readouterr().out
    assert "gc200" in text and "1472" in text and "wavefront" in text


def test_schedule_command_errors_are_one_line(capsys):
    assert main(["schedule", "--zoo", "alexnet-small", "--policy", "nope"]) == 1
    assert "unknown scheduling policy 'nope'" in capsys.readouterr().err
    assert main(["schedule", "--zoo", "alexnet-small", "--vdevice", "tpu"]) == 1
    assert "unknown vDevice preset 'tpu'" in capsys.readouterr().err


def test_plot_reports_the_file_it_wrote_with_one_time_axis(tmp_path, capsys):
    from rammer.cli import main

    target = tmp_path / "g4"
    assert main(["schedule", "--zoo", "nasnet-small", "--backend", "reference", "--plot", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {target}.png" in out and (tmp_path / "g4.png").is_file()
    assert not target.exists()
