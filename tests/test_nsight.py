"""h3gates.rungs.nsight on a CPU: the real H200 CSV, planning, diffing, and capture() through a fake ncu."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import referencing

from h3gates.rungs import nsight as N

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
SCHEMA = json.loads((Path(__file__).parent.parent / "h3gates" / "schemas" / "nsight.fragment.json").read_text())


def _validate(instance, ref="h3gates/nsight"):
    registry = referencing.Registry().with_resource(SCHEMA["$id"], referencing.Resource.from_contents(SCHEMA))
    jsonschema.Draft202012Validator({"$ref": ref}, registry=registry).validate(instance)


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    # A copy with the executable bit set: a checkout or a device copy may not keep the fixture's mode.
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    shutil.copy(FIXTURES / "ncu", ncu)
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("H3GATES_NCU", str(ncu))
    monkeypatch.delenv("FAKE_NCU_KERNELS", raising=False)
    monkeypatch.delenv("FAKE_NCU_FAIL", raising=False)
    return ncu


def _target(marker):
    """A profiled process that proves it ran by writing a marker file."""
    return [sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')", str(marker)]


def test_parse_real_h200_csv():
    kernels = N.parse_csv((FIXTURES / "h200_details.csv").read_text())
    assert [k["id"] for k in kernels] == [0, 7, 8, 9, 10]
    q = kernels[2]
    assert q["name"] == "quantize_into<__nv_bfloat16, 4>"
    assert q["full_name"].startswith("void quantize_into<__nv_bfloat16, 4>(const T1 *, long long,")
    assert (q["grid"], q["block"], q["process_id"], q["stream"]) == ([3, 9472, 1], [128, 1, 1], 575, 7)
    assert (q["duration_ns"], q["dram_read_bytes"], q["dram_write_bytes"]) == (151_136, 406_578_432, 105_974_528)
    assert (q["registers"], q["inst_executed"], q["sm_throughput_pct"]) == (80, 116_201_898, 75.82)
    # Collected on the H200 but in no FIELDS entry: kept under metrics. Not collected there: None.
    assert q["metrics"]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == 70.49
    assert q["l2_bytes"] is None and q["tensor_pipe_pct"] is None
    # The demangled name of a lambda-heavy at:: kernel loses only 'void ' and its last parameter list.
    assert kernels[0]["name"].startswith(
        "at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4, void templates::"
    )
    assert kernels[0]["name"].endswith("::[lambda(int, float) (instance 1)]>")
    totals = N.summarize(kernels)
    assert totals["kernel_count"] == 5
    assert totals["duration_ns"] == 452_960 + 976_480 + 151_136 + 96_352 + 3_744
    assert totals["l2_bytes"] is None and totals["incomplete"] == ["l2_bytes"]


def test_parse_units_and_na():
    head = '"ID","Process ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"\n'

    def row(metric, unit, value):
        return f'"3","9","nvjet_x","(128, 1, 1)","(2, 1, 1)","{metric}","{unit}","{value}"\n'

    text = (
        head
        + "target output in between\n"
        + row("gpu__time_duration.sum", "usecond", "1.50")
        + row("dram__bytes_read.sum", "Mbyte", "2.00")
        + row("launch__shared_mem_per_block_allocated", "Kbyte/block", "16.38")
        + row("lts__t_sector_hit_rate.pct", "%", "n/a")
        + row("smsp__inst_executed.sum", "inst", "1,234,567")
    )
    [k] = N.parse_csv(text)
    assert k["name"] == "nvjet_x"
    assert k["duration_ns"] == pytest.approx(1500)
    assert k["dram_read_bytes"] == pytest.approx(2e6)
    assert k["shared_mem_bytes"] == pytest.approx(16380)
    assert k["l2_hit_pct"] is None and "lts__t_sector_hit_rate.pct" in k["metrics"]
    assert k["inst_executed"] == 1_234_567
    assert N.parse_csv("==PROF== nothing profiled\n") == []
    with pytest.raises(N.NcuError, match="header lacks"):
        N.parse_csv('"ID","Process ID","Kernel Name"\n')


def test_plan_records_missing_counter_and_never_substitutes():
    offered = {
        "dram__bytes_read",
        "dram__bytes_read.sum",
        "sm__throughput",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "lts__t_bytes",
        "launch__registers_per_thread",
        "smsp__pipe_tensor_op_hmma_cycles_active",
    }
    requested = [
        "dram__bytes_read.sum",
        "sm__throughput.avg.pct_of_peak_sustained_active",
        "lts__t_bytes.sum",
        "launch__registers_per_thread",
        "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    ]
    collect, unavailable = N.plan(requested, offered)
    assert collect == {
        "dram__bytes_read.sum": "exact",
        "lts__t_bytes.sum": "base",
        "launch__registers_per_thread": "exact",
    }
    assert set(unavailable) == {
        "sm__throughput.avg.pct_of_peak_sustained_active",
        "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    }
    assert (
        "smsp__pipe_tensor_cycles_active is not listed"
        in unavailable["smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
    )
    assert (
        "not the suffix .avg.pct_of_peak_sustained_active"
        in unavailable["sm__throughput.avg.pct_of_peak_sustained_active"]
    )
    assert "smsp__pipe_tensor_op_hmma_cycles_active" not in collect  # the similar counter is not taken instead


def _k(name, ns, read, write):
    return {
        "name": name,
        "duration_ns": ns,
        "dram_read_bytes": read,
        "dram_write_bytes": write,
        "l2_bytes": 1,
        "inst_executed": 1,
    }


def test_diff_gone_new_common_totals():
    base = [_k("amax", 100, 10, 1), _k("quant", 200, 20, 2), _k("gemm", 1000, 50, 5), _k("quant", 200, 20, 2)]
    cand = [_k("mod_quant", 250, 20, 2), _k("gemm", 990, 50, 5)]
    d = N.diff(base, cand)
    assert d["gone"] == {"amax": {"count": 1, "duration_ns": 100}, "quant": {"count": 2, "duration_ns": 400}}
    assert d["new"] == {"mod_quant": {"count": 1, "duration_ns": 250}}
    assert d["common"]["gemm"] == {
        "baseline_count": 1,
        "candidate_count": 1,
        "baseline_duration_ns": 1000,
        "candidate_duration_ns": 990,
        "delta_ns": -10,
    }
    assert (d["baseline"]["duration_ns"], d["candidate"]["duration_ns"]) == (1500, 1240)
    assert (d["baseline"]["dram_bytes"], d["candidate"]["dram_bytes"]) == (110, 77)
    assert d["duration_ratio"] == pytest.approx(1240 / 1500) and d["dram_bytes_ratio"] == pytest.approx(0.7)
    _validate(d, "h3gates/nsight#/$defs/diff")
    # A side without DRAM counters has no DRAM total and no ratio, rather than a partial one.
    d = N.diff(base, [{**cand[0], "dram_read_bytes": None}, cand[1]])
    assert d["candidate"]["dram_bytes"] is None and d["dram_bytes_ratio"] is None


def test_command_profiles_only_the_opened_range(tmp_path):
    cmd = N.command(
        "/x/ncu", ["a.sum", "b"], ["python", "-m", "h3gates"], export=tmp_path / "r", log_file=tmp_path / "l"
    )
    assert cmd[0] == "/x/ncu" and cmd[-3:] == ["python", "-m", "h3gates"]
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b"
    assert cmd[cmd.index("--export") + 1] == str(tmp_path / "r")


def test_capture_end_to_end_with_fake_ncu(fake_ncu, tmp_path):
    marker = tmp_path / "ran"
    res = N.capture(_target(marker), N.DEFAULT_METRICS, tmp_path / "work", timeout=60, name="baseline")
    assert marker.read_text() == "ran"  # ncu launched the target
    assert res["available"] is True and res["reason"] is None, res
    assert res["ncu"] == str(fake_ncu) and res["ncu_version"] == "2025.3.1.0"
    tensor = "smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    assert list(res["unavailable"]) == [tensor] and "not listed" in res["unavailable"][tensor]
    assert tensor not in res["command"][res["command"].index("--metrics") + 1]
    assert set(res["metrics"]) == set(N.DEFAULT_METRICS) - {tensor}
    assert set(res["metrics"].values()) == {"exact"}  # the suffix query confirmed every full name
    assert [k["name"] for k in res["kernels"]] == [
        "amax_reduce<__nv_bfloat16>",
        "finalize_scale<__nv_bfloat16>",
        "quantize_into<__nv_bfloat16, 4>",
        "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT",
    ]
    gemm = res["kernels"][3]
    assert (gemm["registers"], gemm["shared_mem_bytes"], gemm["grid_blocks"], gemm["waves"]) == (168, 213_248, 132, 1.0)
    assert all(k["tensor_pipe_pct"] is None for k in res["kernels"])
    assert res["totals"]["duration_ns"] == 96_352 + 3_744 + 151_136 + 1_912_384
    assert (
        res["report_file"] == str(tmp_path / "work" / "baseline.ncu-rep")
        and (tmp_path / "work" / "baseline.csv").exists()
    )
    _validate(res)

    cand = N.capture(
        _target(marker),
        N.DEFAULT_METRICS,
        tmp_path / "work",
        timeout=60,
        name="candidate",
        env={**os.environ, "FAKE_NCU_KERNELS": "candidate"},
    )
    d = N.diff(res["kernels"], cand["kernels"])
    assert set(d["gone"]) == {"amax_reduce<__nv_bfloat16>", "quantize_into<__nv_bfloat16, 4>"}
    assert set(d["new"]) == {"modulate_amax<__nv_bfloat16>", "modulate_quantize<__nv_bfloat16, 2>"}
    assert d["common"]["finalize_scale<__nv_bfloat16>"]["delta_ns"] == 0


def test_capture_times_its_phases_from_the_targets_range_marks(fake_ncu, tmp_path):
    """Where a capture's time goes (issue 31: rung 8's 38-44 s a side): ncu's queries, the target up to its range,
    the range itself (the replayed block), the exit and report, the import, read from the marks profiled_range
    prints on the target's stderr. A target that marks no range gets its whole run as before_range_s."""
    code = (
        "import time; from h3gates.rungs import nsight as N; time.sleep(0.2); N.mark('open'); time.sleep(0.6); "
        "N.mark('close'); time.sleep(0.1)"
    )
    res = N.capture([sys.executable, "-c", code], N.DEFAULT_METRICS, tmp_path / "w", timeout=60, name="candidate")
    ph = res["phases"]
    assert res["available"] is True and set(ph) == {
        "query_s", "before_range_s", "range_s", "after_range_s", "import_s", "total_s"
    }  # fmt: skip
    assert 0.6 <= ph["range_s"] < 3 and ph["before_range_s"] >= 0.2 and ph["after_range_s"] >= 0.1
    assert ph["query_s"] > 0 and ph["import_s"] > 0
    parts = ph["query_s"] + ph["before_range_s"] + ph["range_s"] + ph["after_range_s"] + ph["import_s"]
    assert parts <= ph["total_s"] < parts + 1
    _validate(res)
    line = N.phases_line("candidate", ph)
    assert line.startswith("Nsight Compute of the candidate: ") and "profiled block 0." in line
    plain = N.capture(_target(tmp_path / "ran"), N.DEFAULT_METRICS, tmp_path / "w", timeout=60, name="baseline")
    assert plain["phases"]["range_s"] is None and plain["phases"]["before_range_s"] > 0
    _validate(plain)
    # a range that opens and never closes (a timeout inside it): the rest of the run is the range's, not before it
    hang = "import time; from h3gates.rungs import nsight as N; time.sleep(0.2); N.mark('open'); time.sleep(60)"
    cut = N.capture([sys.executable, "-c", hang], N.DEFAULT_METRICS, tmp_path / "w", timeout=3, name="candidate")
    ph = cut["phases"]
    assert cut["available"] is False and ph["after_range_s"] is None and ph["import_s"] is None
    assert 0.2 <= ph["before_range_s"] < 2.5 and ph["range_s"] > 0.5, ph
    assert ph["before_range_s"] + ph["range_s"] >= 2.9  # the run until the timeout, all of it counted
    _validate(cut)


def test_capture_takes_the_queries_started_ahead_only_for_its_own_ncu_and_metrics(fake_ncu, tmp_path, monkeypatch):
    """query_ahead starts ncu's version and metric queries in a thread (rung 8's process builds its gate while they
    run); capture(ahead=...) takes their answer instead of asking again, with the same result as asking itself,
    and asks itself where they were about other metrics or another ncu; a query that failed ahead fails the
    capture as one failing inside it does. Catches: the queries run twice, an answer about other metrics
    used (a counter planned that was never checked), or a failed query ahead raising out of capture."""
    marker = tmp_path / "ran"
    ahead = N.query_ahead(N.DEFAULT_METRICS)
    assert ahead is not None and ahead.ncu == str(fake_ncu)
    version, offered = ahead.result()
    asked = []
    real_version, real_query = N.ncu_version, N.query_metrics
    monkeypatch.setattr(N, "ncu_version", lambda ncu: asked.append("version") or real_version(ncu))
    monkeypatch.setattr(N, "query_metrics", lambda ncu, req: asked.append("metrics") or real_query(ncu, req))
    res = N.capture(_target(marker), N.DEFAULT_METRICS, tmp_path / "w", timeout=60, name="candidate", ahead=ahead)
    own = N.capture(_target(marker), N.DEFAULT_METRICS, tmp_path / "w2", timeout=60, name="candidate")
    assert asked == ["version", "metrics"]  # the second capture's own queries only
    assert res["available"] and res["ncu_version"] == version == own["ncu_version"]
    assert (res["metrics"], res["unavailable"]) == (own["metrics"], own["unavailable"])
    _validate(res)
    asked.clear()
    N.capture(_target(marker), N.SEED_METRICS, tmp_path / "w3", timeout=60, name="candidate", ahead=ahead)
    assert asked == ["version", "metrics"]  # asked about other metrics: not taken
    monkeypatch.setattr(N, "ncu_version", real_version)
    monkeypatch.setattr(N, "query_metrics", real_query)
    # queries that failed ahead (once: a flaky ncu) are asked again in line, as a capture asked before
    flaky = tmp_path / "flaky-ncu"
    flaky.write_text(
        f"#!/bin/sh\nif [ ! -e {tmp_path}/failed-once ]; then touch {tmp_path}/failed-once; echo busy >&2; exit 3; fi\n"
        f'exec {fake_ncu} "$@"\n'
    )
    flaky.chmod(0o755)
    monkeypatch.setenv("H3GATES_NCU", str(flaky))
    once = N.query_ahead(N.DEFAULT_METRICS)
    with pytest.raises(N.NcuError, match="exited 3"):
        once.result()
    res = N.capture(_target(marker), N.DEFAULT_METRICS, tmp_path / "w4", timeout=60, ahead=once)
    assert res["available"] and res["ncu_version"] == version, res["reason"]
    # and an ncu whose queries fail in line too fails the capture, as it did
    broken = tmp_path / "broken-ncu"
    broken.write_text("#!/bin/sh\necho 'no GPU found' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("H3GATES_NCU", str(broken))
    failed = N.query_ahead(N.DEFAULT_METRICS)
    res = N.capture(_target(marker), N.DEFAULT_METRICS, tmp_path / "w5", timeout=60, ahead=failed)
    assert (
        res["available"] is False
        and res["reason"].startswith("ncu could not be queried")
        and "exited 3" in res["reason"]
    )
    _validate(res)
    monkeypatch.setenv("H3GATES_NCU", str(tmp_path / "no-such-ncu"))
    assert N.query_ahead() is None


def test_capture_without_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("H3GATES_NCU", str(tmp_path / "no-such-ncu"))
    res = N.capture(_target(tmp_path / "ran"), N.SEED_METRICS, tmp_path, timeout=60)
    assert res["available"] is False and res["reason"].startswith("ncu not found")
    assert res["unavailable"] == dict.fromkeys(N.SEED_METRICS, res["reason"])
    assert not (tmp_path / "ran").exists()
    assert [k for k, v in res["phases"].items() if v is not None] == ["total_s"]  # nothing else ran
    _validate(res)


def test_capture_with_failing_ncu(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    res = N.capture(_target(tmp_path / "ran"), N.DEFAULT_METRICS, tmp_path, timeout=60)
    assert res["available"] is False and res["reason"] == "ncu exited 1"
    assert "ERR_NVGPUCTRPERM" in res["stderr_tail"] and "fake ncu: profiling failed" in res["stderr_tail"]
    assert res["kernels"] == [] and res["totals"] is None
    _validate(res)


def test_capture_when_no_kernel_was_profiled(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_KERNELS", "none")
    res = N.capture(_target(tmp_path / "ran"), N.DEFAULT_METRICS, tmp_path, timeout=60)
    assert res["available"] is False and res["reason"].startswith("ncu profiled no kernels")
    assert "No kernels were profiled" in res["stderr_tail"]


def test_capture_timeout_kills_ncu_and_target(fake_ncu, tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    res = N.capture(sleeper, N.DEFAULT_METRICS, tmp_path, timeout=1)
    assert res["available"] is False and "timed out after 1 s" in res["reason"]


def test_find_ncu(tmp_path, monkeypatch, fake_ncu):
    assert N.find_ncu() == str(fake_ncu)
    monkeypatch.setenv("H3GATES_NCU", str(tmp_path))  # a folder is not an executable, and no fallback hides that
    assert N.find_ncu() is None and "H3GATES_NCU" in N._not_found_reason()
    monkeypatch.delenv("H3GATES_NCU")
    monkeypatch.setenv("PATH", str(fake_ncu.parent))
    assert N.find_ncu() == str(fake_ncu)


def test_profiled_range_brackets_the_body(monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    monkeypatch.setattr(N, "mark", lambda what: calls.append(what))
    with N.profiled_range():
        calls.append("block")
    assert calls == ["sync", "start", "open", "block", "sync", "stop", "close"]
    calls.clear()
    with pytest.raises(ValueError), N.profiled_range():
        raise ValueError("block failed")
    assert calls == ["sync", "start", "open", "sync", "stop", "close"]  # closed even when the block raises


def test_module_needs_no_torch():
    code = "import sys, h3gates.rungs.nsight; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_pid(pidfile, tries: int = 200) -> int:
    import time

    for _ in range(tries):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    return int(pidfile.read_text())


def _gone(pid: int, tries: int = 100) -> bool:
    import time

    for _ in range(tries):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stopped_capture_leaves_no_process_behind(tmp_path, sig):
    """The rung process running ncu is stopped (snakemake's SIGTERM, or SIGKILL): ncu's whole session
    goes with it (a left-over capture once held 93 GiB of the H200 and crashed the next rung)."""
    import signal as S
    import subprocess
    import sys

    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import sys; from h3gates.rungs import nsight; "
        f"nsight._run([sys.executable, '-c', \"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)\"], 120)"  # noqa: E501
    )
    rung = subprocess.Popen([sys.executable, "-c", code], cwd=str(Path(__file__).resolve().parent.parent))
    child = _wait_pid(pidfile)
    assert _alive(child)
    rung.send_signal(getattr(S, sig))
    rung.wait(timeout=10)
    assert _gone(child), f"the capture's process outlived its rung after {sig}"


def test_the_profiled_target_exits_when_ncu_is_gone(tmp_path):
    import subprocess
    import sys

    pidfile = tmp_path / "target.pid"
    code = (
        "import os, subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', "
        f"\"import os, time; from h3gates.rungs import nsight; nsight.exit_with_parent(0.05); open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)\"]); "  # noqa: E501
        "time.sleep(120)"
    )
    ncu_like = subprocess.Popen([sys.executable, "-c", code], cwd=str(Path(__file__).resolve().parent.parent))
    target = _wait_pid(pidfile)
    ncu_like.kill()
    ncu_like.wait()
    assert _gone(target)


def test_sigterm_kills_ncus_whole_session_not_only_ncu(tmp_path):
    """The capture's child starts its own child (as ncu starts the profiled target): on SIGTERM the
    rung kills the whole session, so the grandchild goes too. PR_SET_PDEATHSIG alone reaches only the
    direct child; this is the killpg path."""
    import signal as S
    import subprocess
    import sys

    pidfile = tmp_path / "target.pid"
    ncu_like = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', \"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)\"]); "  # noqa: E501
        "time.sleep(120)"
    )
    code = f"import sys; from h3gates.rungs import nsight; nsight._run([sys.executable, '-c', {ncu_like!r}], 120)"
    rung = subprocess.Popen([sys.executable, "-c", code], cwd=str(Path(__file__).resolve().parent.parent))
    target = _wait_pid(pidfile)
    rung.send_signal(S.SIGTERM)
    rung.wait(timeout=10)
    assert _gone(target), "the grandchild (ncu's target) outlived the stopped rung"
