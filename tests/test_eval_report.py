"""The report from a store filled with the hand-made log, and the LangSmith upload against a mock
server on 127.0.0.1 (nothing leaves the machine)."""

import json
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

from evals.replay import replay_run
from evals.report import langsmith_configured, upload_to_langsmith, write_report
from evals.store import ResultsStore
from run_vocabulary.policies import PolicySettings
from run_vocabulary.records import RunSummary
from mucutlass.cli import main

LOG = Path(__file__).parent / "data" / "eval" / "budget_log.json"


@pytest.fixture
def store(tmp_path):
    s = ResultsStore(tmp_path / "ev" / "results.sqlite")
    s.init_evaluation({"source": {"suite": "mini"}, "problems": ["P1", "P2"], "tiers": ["mini"],
                       "policies": ["fixed", "sol"], "max_attempts": 10},
                      {"gpu": "NVIDIA H200", "backend": "cutlass", "versions": {"torch": "2.13"}})
    logs = [RunSummary.model_validate(d) for d in json.loads(LOG.read_text())]
    for log in logs:
        s.finish_run(log)
        s.finish_run(replay_run(log, "sol", PolicySettings(max_attempts=10)), status="derived", derived_from="fixed")
    # a flagged result: out of the headline, listed under integrity
    flagged = logs[0].model_copy(deep=True, update={"policy": "flagged", "problem": "P1"})
    flagged.attempts[-2].flags = ["sol_ceiling: 1.3x faster than the bound"]
    s.finish_run(flagged.model_copy(update={"best_index": 9}))
    yield s
    s.close()


def test_report_tables_and_plots(store, tmp_path, monkeypatch):
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    path = write_report(store, tmp_path / "out")
    text = path.read_text()
    # geomean over eager_fp32: fixed sqrt(100/12 * 50/6) = 8.333; sol eps=2.5 sqrt(100/30 * 50/12) = 3.727
    assert "| mini | dsl+sol | fixed | 2 | 2 | 0 | 8.333x |" in text
    assert "| mini | dsl+sol | sol | 2 | 2 | 0 | 3.727x |" in text
    assert "| mini | dsl+sol | flagged | 1 | 0 | 1 | - |" in text  # its one result is flagged: no headline number
    assert "policy `sol` was derived by replaying the `fixed` logs" in text
    assert "P1 [mini, dsl+sol, flagged]: sol_ceiling: 1.3x faster than the bound" in text
    assert "| mini | dsl+sol | sol | 44.7% | 73.1% of tokens | 75.0% | 1.66x |" in text  # retention, saved, gain
    assert "## Budgeting study" in text and "sol+plateau:eps=2.5:w=12" in text
    for png in ("fast_p.png", "speedup_vs_sol.png", "spend_vs_speedup.png", "attempt_curves.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"]({png})" in text


def test_report_command(store, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    assert main(["report", str(tmp_path / "ev")]) == 0
    assert (tmp_path / "ev" / "report" / "report.md").is_file()
    assert main(["replay", str(tmp_path / "ev"), "--policies", "sol", "--eps", "2.5"]) == 0
    assert "| mini | dsl+sol | sol:eps=2.5 | 2/2 | 4/16 | 75.0% | 73.1% |" in capsys.readouterr().out


class _MockLangSmith(BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):
        pass

    def _reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = urlparse(self.path).path
        self.requests.append(("GET", path, None))
        if path.endswith("/info"):
            return self._reply(200, {"version": "0.0-mock"})
        return self._reply(200, [])  # no dataset, no examples yet

    def do_POST(self):
        path = urlparse(self.path).path
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.requests.append(("POST", path, body))
        now = datetime.now(timezone.utc).isoformat()
        tenant = str(uuid.UUID(int=1))
        if path.endswith("/datasets"):
            return self._reply(200, {"id": str(uuid.uuid4()), **body, "created_at": now, "modified_at": now,
                                     "tenant_id": tenant})
        if path.endswith("/examples"):
            return self._reply(200, {**body, "created_at": now, "modified_at": now})
        if path.endswith("/sessions"):
            return self._reply(200, {"id": str(uuid.uuid4()), **body, "start_time": now, "tenant_id": tenant})
        if path.endswith("/feedback"):
            return self._reply(200, {**body, "created_at": now, "modified_at": now})
        return self._reply(200, {})


def test_langsmith_upload_to_a_mock_server(store, monkeypatch):
    _MockLangSmith.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MockLangSmith)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("LANGSMITH_API_KEY", "test-key")
        monkeypatch.setenv("LANGSMITH_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        assert langsmith_configured()
        names = upload_to_langsmith(store)
    finally:
        server.shutdown()
    assert len(names) == 3 and all(n.startswith("mucutlass-mini-") for n in names)  # fixed, flagged, sol
    posts = [(p, b) for m, p, b in _MockLangSmith.requests if m == "POST"]
    sessions = [b for p, b in posts if p.endswith("/sessions")]
    assert [s["name"] for s in sessions] == names and all(s["reference_dataset_id"] for s in sessions)
    examples = [b for p, b in posts if p.endswith("/examples")]
    assert sorted(e["inputs"]["problem"] for e in examples) == ["P1", "P2"]
    runs = [b for p, b in posts if p.endswith("/runs")]
    assert len(runs) == 2 + 2 + 1  # fixed and sol: P1, P2; flagged: P1
    assert {r["reference_example_id"] for r in runs} == {e["id"] for e in examples}
    feedback = [b for p, b in posts if p.endswith("/feedback")]
    fixed_p1 = next(r for r in runs if r["inputs"]["problem"] == "P1" and r["session_name"] == names[0])
    speedup = next(f for f in feedback if f["run_id"] == fixed_p1["id"] and f["key"] == "speedup_vs_eager_fp32")
    assert speedup["score"] == pytest.approx(100 / 12, abs=1e-3)  # the client keeps 4 decimals
    assert speedup["session_id"] == next(s["id"] for s in sessions if s["name"] == names[0])


def test_nothing_is_sent_without_langsmith(store, tmp_path, monkeypatch):
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    monkeypatch.setenv("LANGSMITH_ENDPOINT", "http://127.0.0.1:9")  # nothing listens; any call would fail
    assert not langsmith_configured()
    assert write_report(store, tmp_path / "out").is_file()


def test_report_and_replay_never_import_problem_code(tmp_path):
    """An evaluation folder names problems everywhere (its config's KernelBench folder, each run's folder and
    run.json); reading it for a report or a replay imports none of them."""
    import os
    import subprocess
    import sys

    marker = tmp_path / "imported"
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    planted = level / "1_P1.py"
    planted.write_text(f"open({str(marker)!r}, 'w').close()\n"
                       "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n"
                       "def get_inputs(): return [torch.rand(4)]\ndef get_init_inputs(): return []\n")
    out = tmp_path / "ev"
    s = ResultsStore(out / "results.sqlite")
    s.init_evaluation({"source": {"kernelbench": str(tmp_path / "kb"), "level": 1, "ids": None}, "problems": ["P1", "P2"],
                       "tiers": ["mini"], "policies": ["fixed"], "max_attempts": 10}, {"gpu": "none"})
    for log in (RunSummary.model_validate(d) for d in json.loads(LOG.read_text())):
        run_dir = out / "runs" / log.problem
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"problem_path": str(planted), "settings": {"tier": "mini"}}))
        s.start_run(log.problem, log.tier, log.policy, run_dir=str(run_dir))
        s.finish_run(log)
    s.close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("LANGSMITH_API_KEY", None)
    for command in (["report", str(out)], ["replay", str(out), "--stops"]):
        done = subprocess.run([sys.executable, "-m", "mucutlass", *command], capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not marker.exists(), f"`mucutlass {command[0]}` imported a problem"
