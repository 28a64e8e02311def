"""The README's install commands and CI's script: PyPI only, and CI runs the README's test command verbatim."""
import os
import pathlib
import re
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CI_RUN = (ROOT / ".ci" / "run").read_text()


def _readme_bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command_verbatim():
    readme_lines = {line.strip() for block in _readme_bash_blocks() for line in block.splitlines()}
    test_line = 'python3 -m pip install -q -e ".[test]" && python3 -m pytest -q'
    assert test_line in readme_lines
    assert test_line in [line.strip() for line in CI_RUN.splitlines()]


def test_no_install_command_names_an_extra_index():
    texts = {"README.md": README, ".ci/run": CI_RUN, "pyproject.toml": (ROOT / "pyproject.toml").read_text()}
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "docs").glob("*.md")})
    for name, text in texts.items():
        assert "--extra-index-url" not in text, name
        assert "extra-index-url" not in text, name


def _run_ci_with_fake_python(tmp_path, torch_importable: bool) -> list[str]:
    """Runs .ci/run with a python3 on PATH that records its arguments instead of installing anything."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_text(CI_RUN)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    fake = bin_dir / "python3"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'case "$*" in "-c import torch") exit "$TORCH_RC";; esac\n'
        "exit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TORCH_RC="0" if torch_importable else "1")
    subprocess.run(["bash", str(repo / ".ci" / "run")], env=env, check=True, capture_output=True, timeout=60)
    return log.read_text().splitlines()


def test_ci_keeps_an_installed_torch(tmp_path):
    calls = _run_ci_with_fake_python(tmp_path, torch_importable=True)
    assert not any("torch==" in call for call in calls), calls
    assert calls[-3:] == ['-m pip install -q -e .[test]', "-m pytest -q", "-m pytest -q -m nvcc"]


def test_ci_puts_the_cpu_torch_in_first_only_when_torch_is_missing(tmp_path):
    calls = _run_ci_with_fake_python(tmp_path, torch_importable=False)
    assert calls == ["-c import torch", "-m pip install -q torch==2.13.0", "-m pip install -q -e .[test]",
                     "-m pytest -q", "-m pytest -q -m nvcc"]
