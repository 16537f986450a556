"""The container tests' host folders that launch/docker.sh mounts (one DeepSpeed op compile per
session); the image itself is the session fixture ``image`` of tests/conftest.py."""

from __future__ import annotations

import pytest

from helpers.container import HostFolders, host_folders


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> HostFolders:
    return host_folders(tmp_path_factory.mktemp("container-host"))
