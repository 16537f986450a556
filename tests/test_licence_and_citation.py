"""The repository's licence and citation files agree with the package: LICENSE is the Apache
License 2.0 text (pyproject's licence) unchanged, CITATION.cff names the package's version and the
DEL paper, and THIRD_PARTY_NOTICES.md names every benchmark folder the repository carries."""

from __future__ import annotations

import hashlib
import re

import yaml

import del_core
from del_core.evaluation.benchmarks.files import FILES
from helpers.shared import REPO

# SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _pyproject(key: str) -> str:
    text = (REPO / "pyproject.toml").read_text()
    return re.search(rf'^{key} = (?:{{ text = )?"([^"]+)"', text, re.MULTILINE).group(1)


def test_the_licence_is_the_apache_2_text_pyproject_names():
    assert _pyproject("license") == "Apache-2.0"
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256


def test_the_citation_names_this_version_and_the_paper():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert (citation["version"], citation["license"]) == (del_core.__version__, "Apache-2.0")
    paper = citation["preferred-citation"]
    assert paper["url"] == "https://arxiv.org/abs/2605.20369" and paper["title"].startswith("DEL: Digit Entropy Loss")
    assert paper in citation["references"]


def test_the_notices_name_every_benchmark_folder():
    notices = (REPO / "THIRD_PARTY_NOTICES.md").read_text()
    section = notices.split("## Benchmark test sets", 1)[1].split("\n## ", 1)[0]
    for folder in {path.split("/")[0] for path in FILES.values()}:
        assert f"`{folder}/`" in section, folder
