"""`mucutlass wheelhouse`: requirement closure and the pip commands (no network)."""

from __future__ import annotations

import argparse
import sys

from mucutlass import wheelhouse


def test_resolve_follows_requirements_and_leaves_out_torch():
    found = wheelhouse.resolve(("pydantic", "lark", "torch", "nvidia-cutlass"))
    assert {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "lark", "nvidia-cutlass"} <= set(found)
    assert "torch" not in found and not any(n.startswith("nvidia-") and n != "nvidia-cutlass" for n in found)
    assert all(v and v[0].isdigit() for v in found.values())


def test_requirement_names_skip_extras():
    assert wheelhouse._requirement_name("Pydantic_Core (==2.46.4)") == "pydantic-core"
    assert wheelhouse._requirement_name('pytest; extra == "test"') is None
    assert wheelhouse._requirement_name('tomli>=1; python_version < "3.11"') == "tomli"


def test_download_commands_are_binary_only_without_deps(tmp_path):
    (cmd,) = wheelhouse.download_commands({"lark": "1.3.1"}, tmp_path, "3.12", "manylinux_2_28_x86_64")
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in cmd and "--no-deps" in cmd and cmd[-1] == "lark==1.3.1"
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert cmd[cmd.index("--platform") + 1] == "manylinux_2_28_x86_64" and cmd.count("--platform") >= 3


def test_cli_dry_run_and_usage_error(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    wheelhouse.register(parser.add_subparsers())
    args = parser.parse_args(["wheelhouse", "--out", str(tmp_path / "w"), "--dry-run", "--package", "lark"])
    assert args.func(args) == 0
    assert "lark==" in capsys.readouterr().out
    bad = parser.parse_args(["wheelhouse", "--python", "python3"])
    assert bad.func(bad) == 2
    assert "3.12" in capsys.readouterr().err


def test_have_list_skips_what_the_host_has(tmp_path):
    have_file = tmp_path / "freeze.txt"
    have_file.write_text("Package    Version\n---------- -------\nTyping_Extensions 4.15.0\nannotated-types==0.7.0\n")
    have = wheelhouse.read_have(have_file)
    assert have == {"typing-extensions", "annotated-types"}
    found = wheelhouse.resolve(("pydantic",), have)
    assert "pydantic" in found and "pydantic-core" in found
    assert "typing-extensions" not in found and "annotated-types" not in found


def test_default_roots_are_the_product_requirements():
    roots = set(wheelhouse.product_roots())
    assert {"langgraph", "langchain-openai", "pydantic", "lark", "nvidia-cutlass"} <= roots
    assert "torch" in roots  # left out later by the exclusion rule, not forgotten
    assert "torch" not in wheelhouse.resolve(tuple(roots))
