"""The names a transformers decoder's cache goes by (``common.caches``): ``cache`` from transformers 5.24,
``past_key_values`` before; read from a forward's parameters and an output's declared fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.caches import cache_name, forward_cache_name, output_cache_field


def test_the_newer_name_wins_and_others_are_not_taken() -> None:
    assert cache_name(["input_ids", "cache", "past_key_values"]) == "cache"
    assert cache_name(["input_ids", "past_key_values"]) == "past_key_values"
    assert cache_name(["input_ids", "cache_position", "use_cache"]) is None


def test_a_forward_s_parameters_name_it() -> None:
    class New:
        def forward(self, input_ids: Any = None, cache: Any = None, **kwargs: Any) -> None: ...

    class Old:
        def forward(self, input_ids: Any = None, past_key_values: Any = None) -> None: ...

    class Neither:
        def forward(self, input_ids: Any = None, **kwargs: Any) -> None: ...

    assert forward_cache_name(New()) == "cache"
    assert forward_cache_name(Old()) == "past_key_values"
    assert forward_cache_name(Neither()) is None


def test_an_output_s_declared_field_names_it() -> None:
    @dataclass
    class New:
        logits: Any = None
        cache: Any = None

        @property
        def past_key_values(self) -> Any:  # 5.24's read-only alias
            return self.cache

    @dataclass
    class Old:
        logits: Any = None
        past_key_values: Any = None

    assert output_cache_field(New()) == "cache"
    assert output_cache_field(Old()) == "past_key_values"
