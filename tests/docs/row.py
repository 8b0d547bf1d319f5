"""One row of :data:`tests.docs.figures.FIGURES`: a phrase of a page and where its figures come from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One phrase of a page and where its figures come from."""

    page: str
    what: str
    pattern: str
    source: Callable[[], tuple[str, ...]]

    @property
    def id(self) -> str:
        """The test's name: the page and the figure."""
        return f"{self.page}: {self.what}"
