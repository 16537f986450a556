"""The training data tokenised once per node into a cache, then memory-mapped by every rank.

:func:`prepare_cached_training_data` gives the same :class:`TrainingData` as the in-memory
reference :func:`del_core.data.splits.prepare_training_data` (the same items in the same order,
so :class:`del_core.training.schedule.StepPlan` makes the same batches), but:

* the rows are streamed into an Arrow table and tokenised by ``datasets.Dataset.map`` with
  ``num_proc`` processes, once: local rank 0 builds the cache entry while the other local ranks
  wait (the caller's ``ordered`` context, :func:`del_core.parallel.local_main_first`);
* every rank then memory-maps the entry's Arrow files: the items are read from the page cache
  when a batch needs them, so N ranks share one copy instead of holding N copies in Python lists.

An entry is the directory ``CACHE_DIR/<key>``, where the key is a digest of everything the tokens
depend on (:func:`cache_key`): the data files (resolved path, size and modification time of each;
``synthetic:N`` and hub names by name), the split, seed, held-out settings, max_length, packing,
prompt_format, the tokenizer (a digest of its full serialisation: vocabulary, merges, added tokens,
normaliser; and its chat template and EOS), and the code version (a digest of this package's data
modules). Any change makes a new entry; old ones stay until deleted. An entry is built in a
private staging directory and renamed into place, so a reader never sees half an entry, and two
nodes building the same entry on a shared file system both succeed (the second rename loses and
its copy is deleted). An interrupted build leaves a ``.<key>.*.partial`` directory to delete.

The default cache directory is ``$DEL_CACHE_DIR/data``, else ``~/.cache/del_core/data``: the root
of the project's other caches (converted models and tokenizers), shared by runs, so a sweep over
losses tokenises its data once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

from del_core.data.jsonl import read_jsonl, write_jsonl
from del_core.data.prompting import require_chat_template
from del_core.data.rows import DataError, data_files, is_local, iter_source
from del_core.data.splits import (
    HELDOUT_NOTE,
    TrainingData,
    check_not_empty,
    heldout_slice,
    packing_note,
    separate_heldout,
)
from del_core.data.tokenized import (
    EncodeReport,
    Example,
    Packed,
    encode,
    encode_all,
    join,
    pack_groups,
    shuffled,
    target_count,
)
from del_core.spans import IGNORE_INDEX

ENTRY_FORMAT = 2  # the layout of an entry; bump when it changes
# The modules whose code decides the tokens of an entry (their source is part of the key).
CODE_MODULES = ("chat", "dataset_cache", "jsonl", "prompting", "rows", "splits", "synthetic", "tokenized")
# Below this many rows per process, starting a worker (it unpickles the tokenizer) costs more
# than it saves.
MIN_ROWS_PER_PROCESS = 2000
MAP_BATCH = 256


def default_cache_dir() -> Path:
    """``$DEL_CACHE_DIR/data``, else ``~/.cache/del_core/data`` (module docstring)."""
    from del_core.tokenizers import CACHE_ROOT

    return CACHE_ROOT / "data"


def default_num_proc() -> int:
    """Tokenising processes when ``data.num_proc`` is not set: the CPUs, at most 8."""
    return min(8, os.cpu_count() or 1)


@dataclass(frozen=True)
class DataRequest:
    """Everything that decides a run's tokenised data (the data keys of the config and the seed)."""

    source: str
    split: str
    eval_source: Optional[str]
    eval_size: int
    max_length: int
    packing: bool
    seed: int
    prompt_format: str = "alpaca"


# --- the key ---------------------------------------------------------------------------------
def source_identity(spec: Optional[str]) -> Any:
    """What identifies a data source's content: (resolved path, size, mtime in ns) of each local
    file, else the spec itself (``synthetic:N`` is a function of spec and seed; a hub dataset is
    taken as fixed under its name)."""
    if not spec or not is_local(spec):
        return spec
    return [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in data_files(spec)]


def tokenizer_identity(tokenizer: Any) -> str:
    """A digest of everything of ``tokenizer`` that changes its tokens: the full serialisation of
    a fast tokenizer (else its vocabulary), its class, chat template and EOS."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    extra = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "chat_template", None), tokenizer.eos_token_id])
    return hashlib.sha256((body + extra).encode()).hexdigest()


def code_version() -> str:
    """A digest of the source of :data:`CODE_MODULES`: any change to them makes new entries."""
    digest = hashlib.sha256(str(ENTRY_FORMAT).encode())
    for name in CODE_MODULES:
        digest.update((Path(__file__).parent / f"{name}.py").read_bytes())
    return digest.hexdigest()


def cache_key(request: DataRequest, tokenizer: Any) -> tuple[str, dict]:
    """(entry name, the fields it digests); the entry name is readable and unique to the fields."""
    fields = {
        "request": asdict(request),
        "source": source_identity(request.source),
        "eval_source": source_identity(request.eval_source),
        "tokenizer": tokenizer_identity(tokenizer),
        "code": code_version(),
    }
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(request.source).name)[:40]
    return f"{stem}-{request.prompt_format}-{request.max_length}-{digest}", fields


# --- the items, read from an entry -----------------------------------------------------------
class ExampleTable(Sequence):
    """The examples of an entry, memory-mapped: ``table[i]`` is the i-th :class:`Example`."""

    def __init__(self, table: Any):
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int) -> Example:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return from_stored(self.table[int(index) % len(self)])


class PackedTable(Sequence):
    """Packed sequences over an :class:`ExampleTable`: sequence i joins the examples
    ``members[offsets[i]:offsets[i + 1]]`` (memory-mapped arrays), as :func:`pack` would."""

    def __init__(self, examples: ExampleTable, members: Any, offsets: Any):
        self.examples, self.members, self.offsets = examples, members, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Packed:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        return join([self.examples[int(j)] for j in self.members[start:end]])


# --- building an entry -----------------------------------------------------------------------
def _row_records(spec: str, split: str, seed: int) -> Iterator[dict]:
    """The source's validated rows as Arrow records: where each came from and the row as JSON
    (one column whatever the row's form, Alpaca or conversation)."""
    for item in iter_source(spec, split, seed):
        yield {"where": item.where, "row": json.dumps(item.row)}


def _read_rows(request: DataRequest, work: Path, fingerprint: str) -> Any:
    """The training source's rows, streamed into an Arrow table under ``work``."""
    import datasets

    features = datasets.Features({"where": datasets.Value("string"), "row": datasets.Value("string")})
    kwargs = {"spec": request.source, "split": request.split, "seed": request.seed}
    try:
        return datasets.Dataset.from_generator(
            _row_records, features=features, gen_kwargs=kwargs, cache_dir=str(work / "rows"), fingerprint=fingerprint
        )
    except datasets.exceptions.DatasetGenerationError as err:
        if isinstance(err.__cause__, DataError):  # the row's own message, naming file and row
            raise err.__cause__ from None
        raise


def to_stored(example: Example) -> dict:
    """An example as an entry stores it: ``targets`` as one bit per position (does it predict the
    next token?), since a target is always the next input id or -100; 4 bytes + 1 bit a token."""
    return {
        "input_ids": example.input_ids,
        "predicts": [t != IGNORE_INDEX for t in example.targets],
        "truncated": example.truncated,
    }


def from_stored(row: dict) -> Example:
    """The :class:`Example` of a stored row (the inverse of :func:`to_stored`)."""
    ids, predicts = row["input_ids"], row["predicts"]
    targets = [ids[t + 1] if predicts[t] else IGNORE_INDEX for t in range(len(ids) - 1)] + [IGNORE_INDEX]
    return Example(ids, targets, row["truncated"])


@dataclass(frozen=True)
class RowEncoder:
    """The ``Dataset.map`` function: :func:`encode` of each row of a batch, with its counts."""

    tokenizer: Any
    max_length: int
    prompt_format: str

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"input_ids": [], "predicts": [], "truncated": [], "n_targets": []}
        for where, text in zip(batch["where"], batch["row"]):
            example = encode(json.loads(text), self.tokenizer, self.max_length, self.prompt_format, where)
            for name, value in to_stored(example).items():
                out[name].append(value)
            out["n_targets"].append(target_count(example))
        return out


def _encoded_features() -> Any:
    import datasets

    ids, bits = datasets.List(datasets.Value("int32")), datasets.List(datasets.Value("bool"))
    count = datasets.Value("int32")
    return datasets.Features({"input_ids": ids, "predicts": bits, "truncated": count, "n_targets": count})


def _tokenise(
    rows: Any, request: DataRequest, tokenizer: Any, num_proc: int, work: Path, fingerprint: str, log
) -> tuple[Any, Any]:
    """(kept examples, report): ``rows`` encoded by ``num_proc`` processes, empty examples dropped."""
    processes = max(1, min(num_proc, len(rows) // MIN_ROWS_PER_PROCESS))
    log(f"[data] tokenising {len(rows)} rows with {processes} process(es)")
    encoded = rows.map(
        RowEncoder(tokenizer, request.max_length, request.prompt_format),
        batched=True,
        batch_size=MAP_BATCH,
        remove_columns=["where", "row"],
        features=_encoded_features(),
        num_proc=processes if processes > 1 else None,
        cache_file_name=str(work / "encoded.arrow"),
        new_fingerprint=fingerprint + "-encoded",  # ours: datasets need not hash the tokenizer
        desc="tokenising",
    )
    truncated = encoded.data.column("truncated").to_numpy()
    n_targets = encoded.data.column("n_targets").to_numpy()
    report = EncodeReport.from_counts(truncated, n_targets)
    if report.dropped_examples:
        encoded = encoded.select((n_targets > 0).nonzero()[0])
    return encoded.remove_columns(["n_targets"]), report


def _split(rows: Any, request: DataRequest, log) -> tuple[Any, list[dict]]:
    """(training rows, held-out rows), as :func:`del_core.data.splits.prepare_training_data` splits."""
    separate = separate_heldout(request.source, request.split, request.eval_source, request.eval_size, request.seed)
    if separate is not None:
        return rows, separate
    held = heldout_slice(len(rows), request.eval_size, request.seed)
    held_set = set(held)
    log(f"[data] held out {len(held)} training rows for evaluation ({HELDOUT_NOTE})")
    eval_rows = [json.loads(text) for text in rows.select(held)["row"]]
    return rows.select([i for i in range(len(rows)) if i not in held_set]), eval_rows


def _write_packing(examples: Any, request: DataRequest, staging: Path) -> int:
    """The packed sequences' members (example indices) and offsets as .npy files; their count."""
    import numpy as np
    import pyarrow.compute as pc

    lengths = pc.list_value_length(examples.data.column("input_ids")).to_numpy()
    order = shuffled(range(len(lengths)), request.seed)
    groups = pack_groups([int(lengths[i]) for i in order], request.max_length)
    members = np.asarray([order[position] for group in groups for position in group], dtype=np.int64)
    offsets = np.cumsum([0] + [len(group) for group in groups], dtype=np.int64)
    np.save(staging / "pack_members.npy", members)
    np.save(staging / "pack_offsets.npy", offsets)
    return len(groups)


def build_entry(entry: Path, request: DataRequest, tokenizer: Any, num_proc: int, fields: dict, log) -> None:
    """Read, split, tokenise (and plan the packing of) the data into ``entry`` (module docstring)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{entry.name}.{socket.gethostname()}.", suffix=".partial", dir=entry.parent)
    )
    try:
        fingerprint = entry.name.rsplit("-", 1)[-1]  # the key's digest (datasets allow 64 characters)
        rows = _read_rows(request, staging / "work", fingerprint)
        train_rows, eval_rows = _split(rows, request, log)
        examples, report = _tokenise(train_rows, request, tokenizer, num_proc, staging / "work", fingerprint, log)
        check_not_empty(report, request.source, request.max_length)
        examples.save_to_disk(str(staging / "train"))
        eval_examples, _ = encode_all(eval_rows, tokenizer, request.max_length, request.prompt_format)
        write_jsonl(staging / "eval_rows.jsonl", eval_rows)
        write_jsonl(staging / "eval_examples.jsonl", (asdict(e) for e in eval_examples))
        packed = _write_packing(examples, request, staging) if request.packing else None
        manifest = {"key": fields, "report": asdict(report), "examples": len(examples), "packed": packed}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
        shutil.rmtree(staging / "work")
        os.rename(staging, entry)
    except OSError:
        if not entry.is_dir():
            raise
        log(f"[data] {entry.name} was built by another process meanwhile; using that copy")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- reading an entry ------------------------------------------------------------------------
def load_entry(entry: Path, request: DataRequest, log) -> TrainingData:
    """The entry's :class:`TrainingData`: memory-mapped items, the held-out rows and examples."""
    import datasets
    import numpy as np

    manifest = json.loads((entry / "manifest.json").read_text())
    examples = ExampleTable(datasets.load_from_disk(str(entry / "train")))
    log(f"[data] {request.source}: {EncodeReport(**manifest['report']).summary()}")
    items: Union[ExampleTable, PackedTable] = examples
    if request.packing:
        members = np.load(entry / "pack_members.npy", mmap_mode="r")
        items = PackedTable(examples, members, np.load(entry / "pack_offsets.npy", mmap_mode="r"))
        log(packing_note(len(examples), len(items), request.max_length))
    eval_examples = [Example(**e) for e in read_jsonl(entry / "eval_examples.jsonl")]
    return TrainingData(items, read_jsonl(entry / "eval_rows.jsonl"), eval_examples)


def prepare_cached_training_data(
    request: DataRequest,
    tokenizer: Any,
    log: Callable[[str], None],
    cache_dir: Optional[Union[str, Path]] = None,
    num_proc: Optional[int] = None,
    ordered: Optional[contextlib.AbstractContextManager] = None,
) -> TrainingData:
    """The run's data from its cache entry, built first when missing (module docstring).

    ``ordered`` is entered around the build: :func:`del_core.parallel.local_main_first` makes local
    rank 0 build while the other local ranks wait, and they then find the entry complete. Every
    rank logs whether it hit the cache; :class:`DataError` as the reference path raises it."""
    if request.prompt_format == "chat":
        require_chat_template(tokenizer)  # before any work, in one clear line
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name, fields = cache_key(request, tokenizer)
    entry = cache / name
    with ordered or contextlib.nullcontext():
        if entry.is_dir():
            log(f"[data] cache hit: {entry}")
        else:
            log(f"[data] cache miss: building {entry}")
            build_entry(entry, request, tokenizer, num_proc or default_num_proc(), fields, log)
    return load_entry(entry, request, log)
