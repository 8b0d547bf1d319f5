"""The ecosystem tests import torchvision through :func:`tests.ecosystems.load.torchvision` (see there)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tv():
    from tests.ecosystems.load import torchvision

    return torchvision()


@pytest.fixture(scope="session")
def timm():
    from tests.ecosystems.load import timm

    return timm()


@pytest.fixture(scope="session")
def diffusers():
    from tests.ecosystems.load import diffusers

    return diffusers()
