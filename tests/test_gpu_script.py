"""The one GPU script (benchmarks/h200_suite.sh): every stage its usage names has its block and its header line,
every benchmark and test file it runs exists, and bash parses it (a typo there costs a machine's start-up)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "h200_suite.sh"


def _stages(text: str) -> list[str]:
    usage = re.search(r"usage: h200_suite.sh ([\w|-]+)", text)
    assert usage, "the script's usage line lists its stages"
    return usage.group(1).split("|")


def test_every_stage_has_its_block_and_its_line_in_the_header():
    text = SCRIPT.read_text()
    header = text.split("set -uo pipefail")[0]
    for stage in _stages(text):
        assert re.search(rf'"\$stage" = {re.escape(stage)}\b', text), f"stage {stage} has no block"
        assert re.search(rf"^#\s+{re.escape(stage)}\s", header, re.M), f"stage {stage} is not described in the header"


def test_every_file_it_runs_exists_and_bash_parses_it():
    text = SCRIPT.read_text()
    paths = set(re.findall(r"\b((?:benchmarks|tests)/[\w/.-]+\.(?:py|sh))\b", text))
    assert paths, "the script names the files it runs"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
