"""The canonical printer with comments: each comment stays beside its statement, `fmt` never loses text, and every
shipped program (examples, the README's, the language reference's) is in canonical form."""

from __future__ import annotations

import pathlib
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsl_compiler import format_program, parse
from dsl_compiler.parser import collect_comments
from dsl_compiler.printer import format_source
from tests.test_language_parser import programs

ROOT = pathlib.Path(__file__).resolve().parent.parent

COMMENTED = """# file head: what the program computes
program p   # the name
input x: f32[64, 128]
param w: f32[256, 128] = "fc.weight#not a comment"    # W is [N, K]
# before b
param b: f32[256] = "fc.bias"
kernel fc = gemm(x, w^T) {   # on the brace line
  # before math
  math = tf32; cluster = 1x1x1   # ends the knob line; cluster is the default and is not printed
  schedule = auto  # a default knob: its comment stays in the kernel
  let h = acc + b[col]   # the bias
  store y: f32 = gelu(h)
  # before the closing brace
}   # after the closing brace
# before the torch step
torch z = softmax(y, dim=1)  # rows
output z # the result
# the very end
"""

EXPECTED = """# file head: what the program computes
program p  # the name

input x: f32[64, 128]
param w: f32[256, 128] = "fc.weight#not a comment"  # W is [N, K]
# before b
param b: f32[256] = "fc.bias"

kernel fc = gemm(x, w^T) {  # on the brace line
  # ends the knob line; cluster is the default and is not printed
  # a default knob: its comment stays in the kernel
  # before math
  math = tf32
  let h = acc + b[col]  # the bias
  store y: f32 = gelu(h)
  # before the closing brace
}  # after the closing brace

# before the torch step
torch z = softmax(y, dim=1)  # rows

output z  # the result

# the very end
"""


def _comment_texts(text: str) -> list[str]:
    return collect_comments(text).texts()


def test_comments_stay_beside_their_statements():
    out, diags = format_source(COMMENTED)
    assert diags == []
    assert out == EXPECTED
    assert parse(out)[0] == parse(COMMENTED)[0]  # comments are no part of the program
    assert sorted(_comment_texts(out)) == sorted(_comment_texts(COMMENTED))


def test_formatting_is_idempotent_with_comments():
    once, _ = format_source(COMMENTED)
    assert format_source(once)[0] == once


def test_a_comment_inside_a_string_is_text_of_the_string():
    out, _ = format_source('param w: f32[4, 4] = "a#b"\ninput x: f32[4, 4]\n'
                           'kernel k = gemm(x, w) { math = tf32; store y: f32 = acc }\noutput y\n')
    assert '"a#b"' in out and _comment_texts(out) == []


def test_trailing_comments_of_knobs_printed_on_one_line_are_joined_not_dropped():
    text = ("input x: f32[4, 4]\nkernel k = gemm(x, x) {\n  tile = 128x128x32  # t\n  schedule = pingpong  # s\n"
            "  math = tf32\n  store y: f32 = acc\n}\noutput y\n")
    out, _ = format_source(text)
    assert "  tile = 128x128x32; schedule = pingpong  # t  # s\n" in out
    assert format_source(out)[0] == out


@st.composite
def commented_programs(draw):
    """A generated program's canonical text with comments put on their own lines and at the ends of lines."""
    program = draw(programs)
    lines = format_program(program).rstrip("\n").split("\n")  # not splitlines: strings may hold \x1e
    out = []
    for i, line in enumerate(lines):
        where = draw(st.sampled_from(["none", "none", "before", "after", "both"]))
        if where in ("before", "both"):
            out.append(f"# c{i} before")
        out.append(line + (f"  # c{i} after" if where in ("after", "both") else ""))
    if draw(st.booleans()):
        out.append("# the end")
    return program, "\n".join(out) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commented_programs())
def test_round_trip_keeps_every_comment_and_the_program(case):
    program, text = case
    out, diags = format_source(text)
    assert diags == [], text
    assert parse(out)[0] == program, out
    # every comment's words survive (two trailing comments of one printed line may be joined)
    words = lambda t: sorted(w for c in _comment_texts(t) for w in c.split())  # noqa: E731
    assert words(out) == words(text), out
    assert format_source(out)[0] == out, out


def _shipped_programs() -> list[tuple[str, str]]:
    found = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "examples").glob("*.mcu"))]
    for doc in ("README.md", "docs/language.md"):
        blocks = re.findall(r"```\n(.*?)```", (ROOT / doc).read_text(), flags=re.S)
        found += [(f"{doc} block {i}", b) for i, b in enumerate(blocks) if re.search(r"^output ", b, flags=re.M) or "language" in doc]
    return found


def test_every_shipped_program_is_canonical():
    shipped = _shipped_programs()
    assert len(shipped) >= 10
    for name, text in shipped:
        program, diags = parse(text)
        if name.startswith("docs/language.md block 0"):
            continue  # the syntax summary, not a program
        assert program is not None, (name, [d.render() for d in diags])
        assert format_source(text)[0] == text, name


def test_fmt_write_keeps_comments_and_refuses_to_lose_text(tmp_path, monkeypatch, capsys):
    from mucutlass.cli import main

    f = tmp_path / "p.mcu"
    f.write_text(COMMENTED)
    assert main(["fmt", "-w", str(f)]) == 0
    assert f.read_text() == EXPECTED
    assert main(["fmt", "--check", str(f)]) == 0
    # a printer that dropped a comment must leave the file untouched
    f.write_text(COMMENTED)
    import dsl_compiler.printer as printer

    real = printer.format_program
    monkeypatch.setattr(printer, "format_program", lambda program, comments=None: real(program, None))
    assert main(["fmt", "-w", str(f)]) == 1
    assert f.read_text() == COMMENTED
    assert "lose a comment" in capsys.readouterr().err


# The emitted C++ of every example, as it was before comments were kept: the printer and parser changes must leave
# the IR, and so the kernels, byte for byte as they were.
EMITTED_SHA256 = {
    "batched_gemm.mcu": "6b093f47bf5116bffe3e30594b5e6ba03acb2f7bcce491dbe70bc86ddcfc767a",
    "conv2d_bias_relu.mcu": "4b8e5ae503ae7fdf0854f22cd8ab2b7819aed2ce5b2f005342ff8730b54bfa5b",
    "depthwise_conv.mcu": "9efaf093b74884e91c6c2b6bd57f2524c33443df33eae25def12a673e028becc",
    "gemm_bias_gelu.mcu": "c8c92e67df294f33d513703cfa00f774973d6082fd6598f0bb92e97f45a8480e",
    "gemm_softmax.mcu": "e54504468c6631df2e5800ac5213b81a15534385fd2acf603f9cacf950db70a7",
    "mlp.mcu": "91d95024348fc433bad4ae8c7c6e68845bce210cee76201fee21b885a982a65b",
    "transposed_gemm.mcu": "d3beca7ff3e724e68b8b34a0edc3e39b2778644733e66b643a2baa88c9d1197f",
}


def test_emitted_cplusplus_of_the_examples_is_unchanged():
    import hashlib

    from dsl_compiler.cutlass.emit import emit_program

    assert sorted(EMITTED_SHA256) == sorted(p.name for p in (ROOT / "examples").glob("*.mcu"))
    for name, expected in EMITTED_SHA256.items():
        text = (ROOT / "examples" / name).read_text()
        for source in (text, format_source(text)[0]):
            emitted, diags = emit_program(parse(source)[0])
            assert diags == []
            digest = hashlib.sha256()
            for kernel in emitted:
                digest.update(kernel.source.encode())
            assert digest.hexdigest() == expected, name
