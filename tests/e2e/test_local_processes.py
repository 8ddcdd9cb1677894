"""e2e/local's process records: what `up` started is its own at once, nothing else ever is.

`e2e/local` records each component's pid, start time and argv, and `is_ours` compares them
with /proc before anything is signalled. These tests load the script as a module, with its
state dir in a temporary directory, and start real (harmless) programs through it. No cluster.

The race they pin down: Popen returns as soon as the child's close-on-exec pipe is closed, which
the kernel does midway through execve; until the kernel has laid out the new program's arguments
/proc/PID/cmdline reads empty (on a busy machine for milliseconds: read straight after Popen, it
was empty in up to 70 of 100 starts of etcd). That window is simulated here by hiding the
command line for the first reads, as the kernel does.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.cluster_env import LOCAL

SLEEP = shutil.which("sleep") or "/bin/sleep"
FALSE = shutil.which("false") or "/bin/false"


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """e2e/local as a module whose state dir is `tmp_path`; what it started is stopped after."""
    loader = importlib.machinery.SourceFileLoader("e2e_local", str(LOCAL))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    monkeypatch.setattr(module, "STATE", tmp_path)
    for sub in ("logs", "run"):
        (tmp_path / sub).mkdir()
    yield module
    for record in (tmp_path / "run").glob("*.json"):
        pid = json.loads(record.read_text())["pid"]
        kill_child(pid)


def kill_child(pid: int) -> None:
    """Kill and reap a child this test started (and only such a child)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return  # reaped already, or not ours: leave it alone
    if reaped == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def hide_command_lines(local: ModuleType, monkeypatch: pytest.MonkeyPatch, reads: int) -> None:
    """Make /proc/PID/cmdline read empty for the next `reads` reads, as while execve runs."""
    real = local.proc_cmdline
    left = [reads]

    def mid_exec(pid: int) -> list[str] | None:
        if left[0] > 0:
            left[0] -= 1
            return []
        result: list[str] | None = real(pid)
        return result

    monkeypatch.setattr(local, "proc_cmdline", mid_exec)


def alive(pid: int) -> bool:
    """Running and not a zombie (an unreaped child that exited reads as not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def record(local: ModuleType, component: str) -> dict[str, Any]:
    rec: dict[str, Any] | None = local.read_record(component)
    assert rec is not None, f"no record of {component}"
    return rec


def rewrite_record(local: ModuleType, component: str, **changes: Any) -> dict[str, Any]:
    rec = record(local, component) | changes
    local.record_path(component).write_text(json.dumps(rec))
    return rec


# ---------------------------------------------------------------------------------------------
# A component `up` started is its own from the moment it is recorded


def test_a_component_is_ours_as_soon_as_it_is_recorded_even_while_its_exec_was_unfinished(
    local: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_command_lines(local, monkeypatch, reads=5)
    local.start("probe", [SLEEP, "600"], 0)
    rec = record(local, "probe")
    assert local.is_ours(rec), f"pid {rec['pid']} started by `up` was judged not ours"


def test_a_component_that_exits_at_once_is_recorded_and_reported_as_exited(
    local: ModuleType,
) -> None:
    local.start("probe", [FALSE], 0)  # returns: an exited child counts as done with execve
    with pytest.raises(local.Failure, match="probe exited"):
        local.wait_until("nothing", lambda: False, 30, "probe")


def test_a_component_whose_exec_never_shows_finished_is_killed_and_up_fails(
    local: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_command_lines(local, monkeypatch, reads=10**9)
    monkeypatch.setattr(local, "EXEC_TIMEOUT_SECONDS", 0.5)
    started: list[int] = []
    popen = local.subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> Any:
        proc = popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(local.subprocess, "Popen", recording_popen)
    with pytest.raises(local.Failure, match="did not show its command line"):
        local.start("probe", [SLEEP, "600"], 0)
    assert len(started) == 1
    assert not alive(started[0]), "the half-started child was left running"
    with pytest.raises(ChildProcessError):
        os.waitpid(started[0], os.WNOHANG)  # and reaped
    assert local.read_record("probe") is None


# ---------------------------------------------------------------------------------------------
# `down` signals only what it started


def test_down_stops_a_component_it_started(local: ModuleType) -> None:
    local.start("probe", [SLEEP, "600"], 0)
    pid = record(local, "probe")["pid"]
    local.stop(["probe"])
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGTERM
    assert local.read_record("probe") is None


def test_down_leaves_alone_a_recorded_pid_whose_command_line_differs(local: ModuleType) -> None:
    local.start("probe", [SLEEP, "600"], 0)
    rec = rewrite_record(local, "probe", argv=[SLEEP, "601"])
    assert not local.is_ours(rec)
    local.stop(["probe"])
    assert alive(rec["pid"]), "down signalled a process whose command line is not the recorded one"
    assert local.read_record("probe") is None  # forgotten, as a pid reused by someone else
    kill_child(rec["pid"])


def test_down_leaves_alone_a_recorded_pid_whose_start_time_differs(local: ModuleType) -> None:
    local.start("probe", [SLEEP, "600"], 0)
    rec = rewrite_record(local, "probe", start_time=record(local, "probe")["start_time"] - 1)
    assert not local.is_ours(rec)
    local.stop(["probe"])
    assert alive(rec["pid"]), "down signalled a process that started at another time"
    assert local.read_record("probe") is None
    kill_child(rec["pid"])
