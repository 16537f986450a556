"""Fetching the real vocabularies: extraction from the sdist, checksums, atomic writes, idempotence.

The offline tests run the extractor on a small ``.tar.gz`` built here with the sdist's layout
(``<top>/vendor/llama.cpp/models/ggml-vocab-*.gguf`` beside other members): what is under test is
the streaming extraction and the checks, which do not depend on the files' content, and the real
sdist is 77 MB behind the network. The last test fetches the real one when PyPI is reachable.
"""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
from pathlib import Path

import pytest

from del_core.tokenizers import vocab_files
from del_core.tokenizers.vocab_files import (
    VOCAB_FILES,
    VocabChecksumError,
    VocabFetchError,
    VocabFile,
    fetch_vocab,
    missing_vocab_files,
)

TOP = "llama_cpp_python-0.3.36"
CONTENT = {"ggml-vocab-alpha.gguf": b"GGUF alpha " * 1000, "ggml-vocab-beta.gguf": b"GGUF beta " * 3000}


def _listed(name: str, content: bytes | None = None) -> VocabFile:
    content = CONTENT[name] if content is None else content
    return VocabFile(name, hashlib.sha256(content).hexdigest(), len(content))


def _fake_sdist(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A .tar.gz with the sdist's layout: the two vocabularies, a decoy of the same name outside
    the models folder, and unrelated members."""
    members = {
        f"{TOP}/README.md": b"readme",
        f"{TOP}/vendor/llama.cpp/models/ggml-vocab-other.gguf": b"not listed",
        f"{TOP}/tests/ggml-vocab-alpha.gguf": b"a decoy outside the models folder",
        **{f"{TOP}/vendor/llama.cpp/models/{name}": data for name, data in CONTENT.items()},
        **(extra or {}),
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_extracts_only_the_listed_files_verified(tmp_path):
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    cache = tmp_path / "cache"
    lines: list[str] = []
    files = (_listed("ggml-vocab-alpha.gguf"), _listed("ggml-vocab-beta.gguf"))
    assert fetch_vocab(cache, sdist, files, log=lines.append) == cache
    assert sorted(p.name for p in cache.iterdir()) == ["ggml-vocab-alpha.gguf", "ggml-vocab-beta.gguf"]
    for name, data in CONTENT.items():
        assert (cache / name).read_bytes() == data  # the models folder's copy, not the decoy
    assert lines[0].endswith(f"2 of 2 missing in {cache}")
    assert any("ggml-vocab-beta.gguf (30.0 kB)" in line for line in lines)


def test_a_second_call_does_nothing(tmp_path, monkeypatch):
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    cache = tmp_path / "cache"
    files = (_listed("ggml-vocab-alpha.gguf"),)
    fetch_vocab(cache, sdist, files, log=lambda _line: None)
    stamp = (cache / "ggml-vocab-alpha.gguf").stat().st_mtime_ns

    def no_download(*_args, **_kwargs):
        raise AssertionError("the second call must not download or read anything")

    monkeypatch.setattr(vocab_files, "download_sdist", no_download)
    monkeypatch.setattr(vocab_files, "extract_vocab_files", no_download)
    lines: list[str] = []
    fetch_vocab(cache, None, files, log=lines.append)
    assert lines == [f"tokenizer vocabularies: all 1 present in {cache}"]
    assert (cache / "ggml-vocab-alpha.gguf").stat().st_mtime_ns == stamp


def test_a_checksum_mismatch_names_the_file_and_both_digests_and_leaves_nothing(tmp_path):
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    cache = tmp_path / "cache"
    wrong = _listed("ggml-vocab-beta.gguf", b"what the list expects")
    actual = hashlib.sha256(CONTENT["ggml-vocab-beta.gguf"]).hexdigest()
    with pytest.raises(VocabChecksumError) as error:
        fetch_vocab(cache, sdist, (wrong,), log=lambda _line: None)
    message = str(error.value)
    assert message.startswith("ggml-vocab-beta.gguf from sdist.tar.gz: SHA-256 ")
    assert actual in message and wrong.sha256 in message and "was not kept" in message
    assert list(cache.iterdir()) == []  # neither the file nor its temporary copy


def test_a_truncated_cache_file_is_fetched_again(tmp_path):
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "ggml-vocab-alpha.gguf").write_bytes(b"GGUF al")  # an earlier copy cut short
    files = (_listed("ggml-vocab-alpha.gguf"),)
    assert missing_vocab_files(cache, files) == list(files)
    fetch_vocab(cache, sdist, files, log=lambda _line: None)
    assert (cache / "ggml-vocab-alpha.gguf").read_bytes() == CONTENT["ggml-vocab-alpha.gguf"]


def test_a_listed_file_absent_from_the_sdist_is_named(tmp_path):
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    files = (_listed("ggml-vocab-alpha.gguf"), VocabFile("ggml-vocab-gamma.gguf", "0" * 64, 3))
    with pytest.raises(VocabFetchError, match=r"has no vendor/llama.cpp/models/ggml-vocab-gamma.gguf"):
        fetch_vocab(tmp_path / "cache", sdist, files, log=lambda _line: None)


def test_a_failed_download_names_the_command(tmp_path, monkeypatch):
    """pip run on a requirement no index has: the error names the pip command."""
    monkeypatch.setattr(vocab_files, "SDIST_REQUIREMENT", "x")

    def fake_run(command, **_kwargs):
        class Done:
            returncode = 1

        return Done()

    monkeypatch.setattr(vocab_files.subprocess, "run", fake_run)
    with pytest.raises(VocabFetchError, match=r"`\S+ -m pip download --no-deps --no-binary :all: x` failed \(exit 1"):
        vocab_files.download_sdist(tmp_path, "x", log=lambda _line: None)


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DEL_VOCAB_DIR", str(tmp_path / "v"))
    assert vocab_files.vocab_cache_dir() == tmp_path / "v"
    monkeypatch.delenv("DEL_VOCAB_DIR")
    assert vocab_files.vocab_cache_dir() == vocab_files.CACHE_ROOT / "vocab"


def test_the_list_names_each_file_once_with_a_sha256():
    names = [item.name for item in VOCAB_FILES]
    assert len(set(names)) == len(names)
    assert all(len(item.sha256) == 64 and int(item.sha256, 16) >= 0 and item.size > 0 for item in VOCAB_FILES)
    families = {"qwen2", "qwen35", "gemma-4", "command-r", "llama-bpe", "gpt-2"}
    assert {f"ggml-vocab-{family}.gguf" for family in families} <= set(names)


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.launches
def test_the_real_sdist_is_fetched_and_verified(tmp_path):
    """pip downloads the real sdist (~77 MB) and every listed file passes its checksum."""
    if not _pypi_reachable():
        pytest.skip("pypi.org:443 is not reachable: the real download needs the network")
    cache = fetch_vocab(tmp_path / "vocab", log=print)
    assert missing_vocab_files(cache) == []
    for item in VOCAB_FILES:
        assert hashlib.sha256((cache / item.name).read_bytes()).hexdigest() == item.sha256


def test_the_command_line_prints_one_error_line_and_exits_1(tmp_path, capsys):
    """An sdist without the real files (the fake one): exit 1, the missing names on stderr."""
    sdist = _fake_sdist(tmp_path / "sdist.tar.gz")
    assert vocab_files.main(["--cache", str(tmp_path / "cache"), "--sdist", str(sdist)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {sdist} has no vendor/llama.cpp/models/ggml-vocab-command-r")
    assert not any(p.suffix == ".gguf" for p in (tmp_path / "cache").iterdir())


def test_the_tests_look_in_the_shared_folders_then_the_cache_and_fetch_once(tmp_path, monkeypatch):
    """tests/helpers/shared.py: $DEL_SHARED_DIR/vocab, ../shared/vocab, the cache; offline, one
    fetch attempt per session and a skip naming `make vocab`."""
    import helpers.shared as shared

    first, second, cache = tmp_path / "env" / "vocab", tmp_path / "shared" / "vocab", tmp_path / "cache"
    monkeypatch.setenv("DEL_SHARED_DIR", str(first.parent))
    monkeypatch.setattr(shared, "REPO", tmp_path / "repo")
    monkeypatch.setenv("DEL_VOCAB_DIR", str(cache))
    monkeypatch.setattr(shared, "_FETCH_ERROR", [])
    for folder in (cache, second, first):
        folder.mkdir(parents=True)
        (folder / "ggml-vocab-x.gguf").write_bytes(b"GGUF")
        assert shared.vocab_file("x") == folder / "ggml-vocab-x.gguf"
    attempts = []

    def offline(**_kwargs):
        attempts.append(1)
        raise VocabFetchError("`pip download ...` failed (exit 1)")

    monkeypatch.setattr(vocab_files, "fetch_vocab", offline)
    for _ in range(2):
        with pytest.raises(
            pytest.skip.Exception, match=r"ggml-vocab-y.gguf not in .*failed \(exit 1\)\): run `make vocab`"
        ):
            shared.vocab_file("y")
    assert attempts == [1]
