"""Model tiers: the thing that writes a μCUTLASS program for a planned change.

A tier is configured in TOML (``nodes/tiers.toml``, a user file via ``--tiers-file`` or
``MUCUTLASS_TIERS``): a name mapping to an OpenAI-compatible endpoint, or to the built-in
``offline`` policy. Two more kinds exist for playback and tests: ``playback:DIR`` plays back
programs from files, and any LangChain chat model can be wrapped in a ``ChatTier``.

Every tier failure (dead endpoint, timeout, a reply without a program) becomes a ``WriterReply``
with ``error`` set: one failed attempt, never a crash of the run.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nodes.tier_types import Tier, TierError, TierSpec, WriterReply, WriterRequest

DEFAULT_TIERS_FILE = Path(__file__).with_name("tiers.toml")


# ---------------------------------------------------------------------------------------------
# Reading the program out of a reply

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_program(reply: str) -> tuple[str | None, str | None]:
    """The program in a model reply: the first ```mcu block (also ```mucutlass/```μcutlass); else
    the only fenced block; else the whole reply if it looks like a program. Returns (text, error)."""
    if not reply or not reply.strip():
        return None, "the reply was empty; answer with exactly one program in a ```mcu block"
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(reply)]
    tagged = [body for lang, body in blocks if lang in ("mcu", "mucutlass", "μcutlass", "ucutlass")]
    if tagged:
        return tagged[0].strip() + "\n", None
    if len(blocks) == 1:
        return blocks[0][1].strip() + "\n", None
    if len(blocks) > 1:
        return None, f"the reply had {len(blocks)} code blocks and none tagged mcu; give exactly one ```mcu block"
    if re.search(r"^\s*(kernel|input|output)\b", reply, re.M):
        return reply.strip() + "\n", None
    return None, "the reply had no program; answer with exactly one program in a ```mcu block"


def extract_python(reply: str) -> tuple[str | None, str | None]:
    """The ModelNew module in a model's reply: the first ```python block that defines ModelNew; else the
    only fenced block; else the whole reply when it defines ModelNew. Returns (text, error)."""
    if not reply or not reply.strip():
        return None, "the reply was empty; answer with one complete ModelNew module in a ```python block"
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(reply)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    for body in python:
        if re.search(r"^\s*class\s+ModelNew\b", body, re.M):
            return body.strip() + "\n", None
    if len(blocks) == 1:
        return blocks[0][1].strip() + "\n", None
    if python:
        return None, "no ```python block defines class ModelNew; give one complete module in a single block"
    if blocks:
        return None, f"the reply had {len(blocks)} code blocks and none tagged python; give exactly one ```python block"
    if re.search(r"^\s*class\s+ModelNew\b", reply, re.M):
        return reply.strip() + "\n", None
    return None, "the reply had no code; answer with one complete ModelNew module in a ```python block"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


# ---------------------------------------------------------------------------------------------
# Tiers


class ChatTier:
    """Any LangChain chat model (``ChatOpenAI`` for configured endpoints, fakes in tests)."""

    languages = ("mcu", "python")  # writes μCUTLASS programs and ModelNew modules (run_vocabulary.variants)

    def __init__(self, chat_model: Any, spec: TierSpec):
        self.chat_model = chat_model
        self.spec = spec
        self.name = spec.name

    def write(self, request: WriterRequest) -> WriterReply:
        from nodes import prompts  # prompts read docs/language.md; only needed when a model writes

        messages = prompts.writer_messages(request)
        config = {
            "run_name": f"write attempt {request.attempt_index}",
            "metadata": {"attempt": request.attempt_index, "tier": self.name, "model": self.spec.model},
            "tags": [f"tier:{self.name}"],
        }
        try:
            reply = self.chat_model.invoke(messages, config=config)
        except Exception as exc:  # a dead endpoint, a timeout, a refused key: one failed attempt
            return WriterReply("", model=self.spec.model, error=f"model call failed: {type(exc).__name__}: {_one_line(exc)}")
        usage = getattr(reply, "usage_metadata", None) or {}
        tokens_in, tokens_out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        model = (getattr(reply, "response_metadata", None) or {}).get("model_name") or self.spec.model
        from run_vocabulary.variants import get_variant

        extract = extract_program if get_variant(request.variant).language == "mcu" else extract_python
        text, error = extract(_content_text(getattr(reply, "content", "")))
        return WriterReply(
            text or "", tokens_in, tokens_out, model, self.spec.cost_usd(tokens_in, tokens_out), error=error
        )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


# ---------------------------------------------------------------------------------------------
# Configuration


def tiers_files(extra: str | Path | None = None) -> list[Path]:
    """The built-in file, then MUCUTLASS_TIERS, then an explicit file; later ones override."""
    files = [DEFAULT_TIERS_FILE]
    env = os.environ.get("MUCUTLASS_TIERS")
    if env:
        files.append(Path(env))
    if extra:
        files.append(Path(extra))
    return files


def load_tiers(extra: str | Path | None = None) -> dict[str, TierSpec]:
    specs: dict[str, TierSpec] = {}
    for path in tiers_files(extra):
        if not path.is_file():
            raise TierError(f"tiers file not found: {path}")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise TierError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError:
            raise TierError(f"{path}: not a text file (a tiers file is UTF-8 TOML)") from None
        except OSError as exc:
            raise TierError(f"{path}: cannot read: {exc.strerror or exc}") from None
        table = data.get("tiers", {})
        if not isinstance(table, dict):
            raise TierError(f"{path}: [tiers] must be a table of tier tables")
        for name, body in table.items():
            if not isinstance(body, dict):
                raise TierError(f"{path}: tiers.{name} must be a table")
            try:
                specs[name] = TierSpec(name=name, **body)
            except ValidationError as exc:
                err = exc.errors()[0]
                field_ = ".".join(str(x) for x in err["loc"])
                raise TierError(f"{path}: tiers.{name}.{field_}: {err['msg']}") from None
    return specs


def tier_identity(name: str, tiers_file: str | Path | None = None) -> str | None:
    """A digest of the spec ``name`` resolves to in the user's configuration (None where it lacks the name):
    what a run folder records of its tier, beside the name, to tell when that configuration has changed."""
    import hashlib

    if name.startswith("playback:"):
        text = name
    else:
        spec = load_tiers(tiers_file).get(name)
        if spec is None:
            return None
        text = spec.model_dump_json()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tier_of(ctx: Any) -> Tier:
    """The run's tier: the one it was given (``ctx.tier_impl``), else the one its settings name."""
    if ctx.tier_impl is None:
        ctx.tier_impl = make_tier(ctx.tier, ctx.tiers_file)
    return ctx.tier_impl


def make_tier(name: str, tiers_file: str | Path | None = None, chat_model_factory: Any = None) -> Tier:
    """Resolve a tier name: ``playback:PATH``, a configured endpoint, or ``offline``."""
    if name.startswith("playback:"):
        from nodes.playback import PlaybackTier

        return PlaybackTier(name.split(":", 1)[1], name=name)
    specs = load_tiers(tiers_file)
    if name not in specs:
        raise TierError(f"unknown tier {name!r}; configured: {', '.join(sorted(specs))} (or playback:DIR)")
    spec = specs[name]
    if spec.kind == "offline":
        try:
            from nodes.offline.policy import OfflineTier
        except ImportError as exc:
            raise TierError(f"the offline tier is not available in this build ({exc}); use another --tier") from None
        return OfflineTier()
    if spec.kind == "playback":
        raise TierError(f"tier {name!r}: playback tiers are named playback:DIR on the command line")
    return ChatTier((chat_model_factory or chat_openai)(spec), spec)


def chat_openai(spec: TierSpec) -> Any:
    if not spec.model:
        raise TierError(f"tier {spec.name!r}: no model set")
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    if spec.api_key_env and not key:
        raise TierError(f"tier {spec.name!r}: the environment variable {spec.api_key_env} holding its API key is not set")
    from langchain_openai import ChatOpenAI
    kwargs: dict[str, Any] = {
        "model": spec.model,
        "base_url": spec.base_url,
        "api_key": key or "none",  # local servers (vLLM, Ollama) accept any key
        "timeout": spec.timeout_s,
        "max_retries": spec.max_retries,
        "stream_usage": True,
    }
    if spec.temperature is not None:
        kwargs["temperature"] = spec.temperature
    if spec.max_tokens is not None:
        kwargs["max_tokens"] = spec.max_tokens
    return ChatOpenAI(**kwargs)
