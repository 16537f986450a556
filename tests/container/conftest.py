"""The image fixtures of the container tests: the CPU image, built or found once per session, and
the host user's folders that launch/docker.sh mounts (one DeepSpeed op compile per session)."""

from __future__ import annotations

import pytest

from helpers.container import BuiltImage, HostFolders, build_image, host_folders, podman_unavailable


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    reason = podman_unavailable()
    if reason is not None:
        pytest.skip(f"the image cannot be built here: {reason}")
    return build_image()


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> HostFolders:
    return host_folders(tmp_path_factory.mktemp("container-host"))
