"""Real tokenizer vocabularies (vocabulary-only GGUF files) fetched from PyPI into a local cache.

The files come unchanged from the source distribution of ``llama-cpp-python==0.3.36`` (folder
``vendor/llama.cpp/models/``, MIT license, see THIRD_PARTY_NOTICES.md), with llama.cpp's reference
tokenizations of three of them. :func:`fetch_vocab` runs
``pip download`` for that sdist (never builds it), streams the archive and writes only the files of
:data:`VOCAB_FILES`, each checked against its SHA-256 below before it is renamed into the cache.

The cache is ``$DEL_VOCAB_DIR`` when set, else ``<del_core cache>/vocab`` (``$DEL_CACHE_DIR``,
``$XDG_CACHE_HOME/del_core`` or ``~/.cache/del_core``). Command line (``make vocab`` runs it)::

    python -m del_core.tokenizers.vocab_files [--cache DIR] [--sdist llama_cpp_python-0.3.36.tar.gz]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

from del_core.tokenizers.loading import CACHE_ROOT

SDIST_REQUIREMENT = "llama-cpp-python==0.3.36"
# Where the files sit inside the sdist (below its top folder).
SDIST_FOLDER = "vendor/llama.cpp/models"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class VocabFile:
    """One vocabulary file: its name, SHA-256 (hex) and size in bytes."""

    name: str
    sha256: str
    size: int


# The vocabulary files the project uses, as shipped in llama-cpp-python 0.3.36.
VOCAB_FILES: tuple[VocabFile, ...] = (
    VocabFile("ggml-vocab-qwen2.gguf", "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c", 5928681),
    VocabFile("ggml-vocab-qwen35.gguf", "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c", 5928682),
    VocabFile(
        "ggml-vocab-deepseek-llm.gguf", "867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76", 3970167
    ),
    VocabFile("ggml-vocab-llama-spm.gguf", "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69", 723869),
    VocabFile("ggml-vocab-phi-3.gguf", "967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326", 726019),
    VocabFile("ggml-vocab-gemma-4.gguf", "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65", 15776467),
    VocabFile(
        "ggml-vocab-command-r.gguf", "a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9", 10874545
    ),
    VocabFile("ggml-vocab-llama-bpe.gguf", "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e", 7818140),
    VocabFile("ggml-vocab-gpt-2.gguf", "cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac", 1766807),
    # llama.cpp's reference tokenizations (inputs, then one line of ids per input, made with the
    # family's Hugging Face tokenizer) of the vocabularies that transformers cannot load or that
    # load as another family: the tests compare the tokenizers with them.
    *(
        VocabFile(f"ggml-vocab-{family}.gguf.{part}", sha256, size)
        for family, part, sha256, size in (
            ("qwen35", "inp", "0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94", 2651),
            ("qwen35", "out", "5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca", 3570),
            ("gemma-4", "inp", "0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448", 1922),
            ("gemma-4", "out", "ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3", 2185),
            ("command-r", "inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0", 1943),
            ("command-r", "out", "d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f", 1905),
        )
    ),
)

Log = Callable[[str], None]


class VocabChecksumError(ValueError):
    """A file read from the sdist does not have the SHA-256 listed in :data:`VOCAB_FILES`."""


class VocabFetchError(RuntimeError):
    """The sdist could not be downloaded or lacks a listed file."""


def vocab_cache_dir() -> Path:
    """The folder the fetched vocabularies live in: ``$DEL_VOCAB_DIR``, else ``<cache root>/vocab``."""
    env = os.environ.get("DEL_VOCAB_DIR")
    return Path(env) if env else CACHE_ROOT / "vocab"


def missing_vocab_files(folder: Path, files: Sequence[VocabFile] = VOCAB_FILES) -> list[VocabFile]:
    """The listed files that ``folder`` lacks (absent, or of another size than listed)."""
    missing = []
    for item in files:
        path = folder / item.name
        if not path.is_file() or path.stat().st_size != item.size:
            missing.append(item)
    return missing


def download_sdist(target: Path, requirement: str = SDIST_REQUIREMENT, log: Log = print) -> Path:
    """``pip download`` the source distribution ``requirement`` into ``target``; its path.

    Only the archive is fetched (``--no-deps --no-binary :all:``); pip reads the package's metadata
    but nothing is compiled. pip prints its own progress (index, file, size). Raises
    :class:`VocabFetchError` naming the command when pip fails (no network, no index).
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", requirement]
    log(f"downloading the source distribution {requirement} (~77 MB) with pip from its configured index (PyPI)")
    proc = subprocess.run([*command, "-d", str(target)])
    archives = sorted(target.glob("*.tar.gz"))
    if proc.returncode != 0 or not archives:
        raise VocabFetchError(f"`{' '.join(command)}` failed (exit {proc.returncode}; pip's output is above)")
    log(f"downloaded {archives[0].name} ({_size(archives[0].stat().st_size)})")
    return archives[0]


def extract_vocab_files(sdist: Path, cache: Path, files: Sequence[VocabFile] = VOCAB_FILES, log: Log = print) -> None:
    """Write ``files`` from the sdist archive ``sdist`` into ``cache``, reading the archive once.

    The archive is streamed (no member but the listed ones is unpacked). Each file is written to a
    temporary name in ``cache``, its SHA-256 compared with the listed one and only then renamed into
    place. Raises :class:`VocabChecksumError` (naming the file and both digests; the file is not
    left in ``cache``) or :class:`VocabFetchError` when a listed file is not in the archive.
    """
    wanted = {item.name: item for item in files}
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, mode="r|gz") as archive:
        for member in archive:
            folder, _, name = member.name.rpartition("/")
            if name not in wanted or not member.isfile() or not folder.endswith(SDIST_FOLDER):
                continue
            stream = archive.extractfile(member)
            assert stream is not None  # a regular file member
            _write_verified(stream, cache, wanted.pop(name), sdist.name)
            log(f"  {name} ({_size(member.size)}) -> {cache}")
    if wanted:
        raise VocabFetchError(f"{sdist} has no {SDIST_FOLDER}/{', '.join(sorted(wanted))}")


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


def _write_verified(stream: IO[bytes], cache: Path, item: VocabFile, origin: str) -> None:
    """Copy ``stream`` to ``cache / item.name`` through a temporary file, if its SHA-256 matches."""
    digest = hashlib.sha256()
    handle, staging = tempfile.mkstemp(prefix=f".{item.name}.", dir=cache)
    try:
        with os.fdopen(handle, "wb") as out:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != item.sha256:
            raise VocabChecksumError(
                f"{item.name} from {origin}: SHA-256 {digest.hexdigest()} does not match the listed "
                f"{item.sha256} (del_core/tokenizers/vocab_files.py); the file was not kept"
            )
        os.chmod(staging, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(staging, cache / item.name)
    finally:
        Path(staging).unlink(missing_ok=True)


def fetch_vocab(
    cache: Optional[Path] = None,
    sdist: Optional[Path] = None,
    files: Sequence[VocabFile] = VOCAB_FILES,
    log: Log = print,
) -> Path:
    """Make sure ``cache`` (default :func:`vocab_cache_dir`) holds every file of ``files``; the folder.

    Returns at once when nothing is missing. Otherwise reads the missing files from ``sdist`` when
    given, else from the sdist :func:`download_sdist` fetches into a temporary folder (removed after).
    """
    cache = Path(cache) if cache is not None else vocab_cache_dir()
    missing = missing_vocab_files(cache, files)
    if not missing:
        log(f"tokenizer vocabularies: all {len(files)} present in {cache}")
        return cache
    log(f"tokenizer vocabularies: {len(missing)} of {len(files)} missing in {cache}")
    if sdist is not None:
        extract_vocab_files(Path(sdist), cache, missing, log)
        return cache
    with tempfile.TemporaryDirectory(prefix="del-vocab-sdist-") as scratch:
        extract_vocab_files(download_sdist(Path(scratch), log=log), cache, missing, log)
    return cache


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m del_core.tokenizers.vocab_files",
        description=f"Fetch the real tokenizer vocabularies (GGUF) from the PyPI sdist {SDIST_REQUIREMENT}.",
    )
    parser.add_argument("--cache", type=Path, default=None, help=f"target folder (default {vocab_cache_dir()})")
    parser.add_argument("--sdist", type=Path, default=None, help="a downloaded sdist to read instead of pip")
    args = parser.parse_args(argv)
    try:
        fetch_vocab(args.cache, args.sdist)
    except (VocabFetchError, VocabChecksumError, OSError, tarfile.TarError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
