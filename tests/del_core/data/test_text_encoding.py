"""A data or predictions file with a line that is not UTF-8: the error names the file, the row
(line) and the byte, raised by the configuration checks (del_core.data.rows.check_source)."""

from __future__ import annotations

import pytest

from del_core.data.jsonl import JsonlError, iter_jsonl, read_jsonl
from del_core.data.rows import DataError, check_source, read_source
from del_core.training.config import ConfigError, load_train_config

GOOD = '{"instruction": "1+1?", "output": "2"}\n'
BAD = b'{"instruction": "2+2?", "output": "4\xe9"}\n'  # latin-1 e-acute


def test_jsonl_names_the_line_that_is_not_utf8(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + BAD + GOOD.encode())
    with pytest.raises(JsonlError, match=rf"^{path}: line 3: not UTF-8 text \(byte 37 of the line is 0xe9\)$"):
        read_jsonl(path)
    assert next(iter_jsonl(path)) == (1, {"instruction": "1+1?", "output": "2"})  # the lines before it read


@pytest.mark.parametrize("suffix, where", [(".jsonl", "row 2"), (".json", "line 3")])
def test_a_data_file_that_is_not_utf8_is_named_by_the_checks(suffix, where, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_text(GOOD)
    path = folder / f"b{suffix}"
    body = GOOD.encode() + BAD if suffix == ".jsonl" else b"[\n" + GOOD.encode()[:-1] + b",\n" + BAD + b"]\n"
    path.write_bytes(body)
    message = f"{path}: {where}: not UTF-8 text"
    with pytest.raises(DataError, match=f"^{message}"):
        check_source(str(folder))
    with pytest.raises(DataError, match=f"^{message}"):
        read_source(str(path))
    with pytest.raises(ConfigError, match=f"^{message}"):
        load_train_config(None, [f"data={folder}"])
    with pytest.raises(ConfigError, match=f"^{message}"):
        load_train_config(None, [f"data.eval_source={path}"])
