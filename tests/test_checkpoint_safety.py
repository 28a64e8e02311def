"""A checkpoint file is untrusted input: a crafted one naming a callable is refused with one line and
a non-zero exit, and the callable never runs; damaged files are one line too."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import ormsgpack
import pytest

from graph.checkpoints import AllowListSerializer, CheckpointError
from run_vocabulary.records import AttemptRecord

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "01_gemm_tiny.py"
EXT_CONSTRUCTOR_SINGLE_ARG, EXT_PYDANTIC_V2 = 0, 5


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mucutlass", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def system_call(command: str) -> ormsgpack.Ext:
    """LangGraph's extension record for ``os.system(command)``."""
    return ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(["os", "system", command]))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ckpt") / "run"
    out = cli("optimize", str(PROBLEM), "--backend", "interpreter", "--max-attempts", "1", "--out", str(run))
    assert out.returncode == 0, out.stderr
    return run


def plant(run_dir: Path, channel: str, value) -> None:
    """Rewrite the latest checkpoint of ``run_dir`` with ``channel`` set to ``value``."""
    db = sqlite3.connect(run_dir / "checkpoints.sqlite")
    thread, ckpt_id, blob = db.execute(
        "SELECT thread_id, checkpoint_id, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
    # extension records (the state's Program values) stay as they are: only ``channel`` changes
    checkpoint = ormsgpack.unpackb(blob, ext_hook=lambda code, data: ormsgpack.Ext(code, data),
                                   option=ormsgpack.OPT_NON_STR_KEYS)
    checkpoint["channel_values"][channel] = value
    db.execute("UPDATE checkpoints SET checkpoint = ? WHERE thread_id = ? AND checkpoint_id = ?",
               (ormsgpack.packb(checkpoint), thread, ckpt_id))
    db.commit()
    db.close()


def copy_run(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def test_resume_refuses_a_checkpoint_naming_os_system(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    marker = tmp_path / "pwned"
    plant(run, "stop_reason", system_call(f"touch {marker}"))
    out = cli("resume", str(run))
    assert out.returncode == 1, out.stdout + out.stderr
    assert not marker.exists(), "the crafted checkpoint ran its command"
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "os.system" in errors[0] and "checkpoints.sqlite" in errors[0]


def test_a_callable_nested_in_an_allowed_record_is_refused(tmp_path):
    marker = tmp_path / "nested"
    record = ormsgpack.Ext(EXT_PYDANTIC_V2, ormsgpack.packb(
        ["run_vocabulary.records", "AttemptRecord", {"index": system_call(f"touch {marker}")}, "model_validate"]))
    with pytest.raises(CheckpointError, match="os.system"):
        AllowListSerializer().loads_typed(("msgpack", ormsgpack.packb({"attempt": record})))
    assert not marker.exists()


@pytest.mark.parametrize("module, name", [("subprocess", "run"), ("builtins", "eval"), ("graph.runner", "resume_run"),
                                          ("evals.store", "ResultsStore")])
def test_only_records_of_the_project_are_revived(module, name):
    ext = ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb([module, name, "x"]))
    with pytest.raises(CheckpointError, match=f"{module}.{name}"):
        AllowListSerializer().loads_typed(("msgpack", ormsgpack.packb([ext])))


def test_plain_data_and_project_records_round_trip():
    serde = AllowListSerializer()
    value = {"attempts": [AttemptRecord(index=2, t_us=3.5)], "n": 1, "s": "x", "f": 0.5, "none": None}
    assert serde.loads_typed(serde.dumps_typed(value)) == value


def test_diagnostic_values_round_trip_and_older_rendered_ones_still_read():
    from dsl_compiler.diagnostics import Diagnostic
    from dsl_compiler.ir import Span
    from graph.state import diagnostics_of

    serde = AllowListSerializer()
    d = Diagnostic(code="tile", message="bad tile", span=Span(line=3, column=7), hint="use 64")
    value = {"diagnostics": [d], "attempts": [AttemptRecord(index=1, diagnostics=[d]).model_dump()]}
    back = serde.loads_typed(serde.dumps_typed(value))
    assert back == value and diagnostics_of(back) == [d]
    # a checkpoint written when the state held rendered text
    older = serde.loads_typed(serde.dumps_typed({"diagnostics": [d.render("program.mcu")]}))
    assert [x.model_dump(exclude={"span"}) for x in diagnostics_of(older)] == [d.model_dump(exclude={"span"})]
    assert diagnostics_of(older)[0].render("program.mcu") == d.render("program.mcu")


def test_pickled_values_are_refused():
    with pytest.raises(CheckpointError, match="pickle"):
        AllowListSerializer().loads_typed(("pickle", b"cos\nsystem\n."))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_resume_of_a_damaged_checkpoint_file_is_one_line(finished_run, tmp_path, damage):
    run = copy_run(finished_run, tmp_path / "run")
    ckpt = run / "checkpoints.sqlite"
    data = ckpt.read_bytes()
    ckpt.write_bytes(os.urandom(8192) if damage == "garbage" else data[: len(data) // 3])
    out = cli("resume", str(run))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "checkpoints.sqlite" in errors[0], out.stderr


def set_latest_checkpoint(run_dir: Path, type_: str, blob: bytes) -> None:
    """Rewrite the latest checkpoint row of ``run_dir`` as ``type_`` with the payload ``blob``."""
    db = sqlite3.connect(run_dir / "checkpoints.sqlite")
    (ckpt_id,) = db.execute("SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
    db.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ?", (type_, blob, ckpt_id))
    db.commit()
    db.close()


@pytest.mark.parametrize("blob", [
    b'{"v": 1, "id": "1f0c0a4e-0000-6000-8000-000000000000", "ts": "t", "channel_values": {}, '
    b'"channel_versions": {}, "versions_seen": {}}',  # no state: LangGraph's EmptyInputError
    b'{"v": 1, "id": "x", "channel_values": {}, "channel_versions": {"a": 1}, "versions_seen": {}}',  # id no UUID
    b"{}", b"null", b"[1, 2]", b"\x87\xa1v\x01",  # no checkpoint at all, msgpack bytes read as JSON
], ids=["no-state", "bad-id", "empty-object", "null", "list", "msgpack-bytes"])
def test_resume_of_a_json_checkpoint_of_the_wrong_shape_is_one_line(finished_run, tmp_path, blob):
    run = copy_run(finished_run, tmp_path / "run")
    set_latest_checkpoint(run, "json", blob)
    out = cli("resume", str(run))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr[-1500:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "checkpoints.sqlite" in errors[0] and "nothing was resumed" in errors[0], out.stderr


def test_a_checkpoint_naming_a_kernel_library_outside_the_cache_is_refused(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    plant(run, "best_artifacts", {"fc": str(tmp_path / "planted.so")})
    out = cli("resume", str(run))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "planted.so" in errors[0] and "kernel cache" in errors[0], out.stderr


@pytest.mark.parametrize("old_module", ["evals.records", "graph.records"])
def test_a_checkpoint_written_before_the_records_moved_still_reads(old_module):
    """Records moved to run_vocabulary: a checkpoint that names their earlier module revives them as they are now."""
    def renamed(code, data):  # each extension record's payload with the records' module named as it was
        payload = ormsgpack.unpackb(data, ext_hook=renamed, option=ormsgpack.OPT_NON_STR_KEYS)
        if isinstance(payload, list) and payload and payload[0] == "run_vocabulary.records":
            payload[0] = old_module
        return ormsgpack.Ext(code, ormsgpack.packb(payload))

    serde = AllowListSerializer()
    kind, blob = serde.dumps_typed({"attempts": [AttemptRecord(index=2, t_us=3.5)]})
    old = ormsgpack.packb(ormsgpack.unpackb(blob, ext_hook=renamed, option=ormsgpack.OPT_NON_STR_KEYS))
    assert old_module.encode() in old and b"run_vocabulary" not in old
    assert serde.loads_typed((kind, old)) == {"attempts": [AttemptRecord(index=2, t_us=3.5)]}
