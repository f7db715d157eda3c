"""The evidence registry: one list of sources, read by the monitor, the capture and the roll call."""
from testlib import FIXTURES
import glob
import os
import shutil
from types import SimpleNamespace

from hpc_hangkit import layout
from hpc_hangkit.capture import orchestrator
from hpc_hangkit.capture.ranks import RankProc
from hpc_hangkit.evidence import flightrec, nvsmi, ras, registry, stacks
from hpc_hangkit.evidence.source import PollContext, Source


def test_every_source_listed_once_in_capture_and_report_order():
    assert [s.name for s in registry.SOURCES] == ["stacks", "flight_recorder", "nvidia_smi", "nccl_ras"]
    assert [s.capture for s in registry.SOURCES] == [stacks.capture_hook, flightrec.capture_hook,
                                                     nvsmi.capture_hook, ras.capture_hook]
    assert [s.name for s in registry.SOURCES if s.section] == ["flight_recorder", "nccl_ras"]
    assert [s.section_dir for s in registry.SOURCES] == [
        layout.STACK_TRACES_DIR, layout.FLIGHT_RECORDER_DIR, layout.NVIDIA_SMI_DIR, layout.NCCL_RAS_DIR]


def _captured_tree(tmp_path):
    hd = tmp_path / "hang_detector"
    shutil.copytree(os.path.join(FIXTURES, "flight_recorder", "gloo_divergent_barrier", "pickle_raw"),
                    str(hd / layout.FLIGHT_RECORDER_DIR))
    (hd / layout.NCCL_RAS_DIR).mkdir()
    for i, p in enumerate(sorted(glob.glob(os.path.join(FIXTURES, "nccl", "b_history", "poll_*.json")))):
        shutil.copy(p, str(hd / layout.NCCL_RAS_DIR / ("ncclras_t%02d.json" % i)))
    return str(hd)


def test_report_sections_are_the_sources_sections_in_order(tmp_path):
    hd = _captured_tree(tmp_path)
    sections, warnings = registry.report_sections(hd)
    assert list(sections) == ["flight_recorder", "nccl_ras"] and warnings == []
    assert sections["flight_recorder"] == flightrec.section_from_dir(hd)
    assert sections["nccl_ras"] == ras.section_from_dir(hd)


def test_report_sections_skip_absent_directories_and_turn_failures_into_warnings(tmp_path, monkeypatch):
    assert registry.report_sections(str(tmp_path)) == ({}, [])
    (tmp_path / layout.NCCL_RAS_DIR).mkdir()

    def broken(hd_dir):
        raise ValueError("bad history")

    monkeypatch.setattr(registry, "SOURCES", (Source("nccl_ras", layout.NCCL_RAS_DIR, section=broken),))
    assert registry.report_sections(str(tmp_path)) == (
        {}, ["nccl ras section unavailable (ValueError: bad history)"])


def test_capture_runs_each_step_in_registry_order_each_guarded(tmp_path, monkeypatch):
    seen = []

    def first(ctx):
        seen.append("first")
        raise RuntimeError("tool crashed")

    def second(ctx):
        seen.append("second")
        return [os.path.join(ctx.hd_dir, "x")]

    monkeypatch.setattr(orchestrator, "SOURCES", (Source("a", capture=first), Source("b"),
                                                  Source("c", capture=second)))
    ctx = orchestrator.CaptureContext(SimpleNamespace(), str(tmp_path / "scratch"), str(tmp_path / "hd"), {})
    res = orchestrator.capture(ctx)
    assert seen == ["first", "second"]
    assert res.files == [os.path.join(str(tmp_path / "hd"), "x")]
    assert res.problems[0].startswith("no live rank found")
    assert res.problems[1] == "capture step %s.first failed: RuntimeError: tool crashed" % __name__


def test_poll_sources_without_ncclras_is_the_stack_source(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncclras
    settings = SimpleNamespace(stack_samples=3, watchdog_signal="SIGUSR1", ncclras_path=None,
                               ncclras_address=None)
    judge = stacks.Judge(lambda s: None, lambda f: False, lambda p, **kw: (None, ""))
    (src,) = registry.poll_sources(PollContext(settings, str(tmp_path), str(tmp_path / "hd"), judge))
    assert isinstance(src, stacks.StackSource) and src.key == "stacks"
    assert (src.scratch, src.judge, src.samples, src.sample_signal) == (str(tmp_path), judge, 3, "SIGUSR1")


def test_stack_capture_step_is_py_spy_of_every_rank(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(stacks, "pyspy_rank", lambda ctx, rp, **kw: calls.append(rp.rank) or "p%d" % rp.rank)
    ctx = SimpleNamespace(ranks={0: RankProc(0, 10, ""), 2: RankProc(2, 12, "")})
    assert stacks.capture_hook(ctx) == ["p0", "p2"] and sorted(calls) == [0, 2]
    assert stacks.capture_hook(SimpleNamespace(ranks={})) == []
