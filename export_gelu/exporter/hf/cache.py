"""transformers' key/value caches as plain tensors, and back: what a graph takes and returns
instead of a `Cache` object (which neither ONNX exporter can pass through a graph boundary).

Handled: `DynamicCache` (transformers 5: `.layers[i].keys/.values`; 4.x: `key_cache` /
`value_cache`, `from_legacy_cache`), `EncoderDecoderCache` (a self-attention and a
cross-attention cache), and the legacy tuple of per-layer tuples.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

#: One layer's (key, value) tensors.
KeyValue: TypeAlias = "tuple[torch.Tensor, torch.Tensor]"


def cache_parameter(model: torch.nn.Module) -> str:
    """The forward() keyword a model takes its cache by: `cache` (transformers 5.2x) or
    `past_key_values` (before)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(output: object) -> object:
    """The cache a model's output carries (None when it returns none)."""
    for name in ("cache", "past_key_values"):
        found = getattr(output, name, None)
        if found is not None:
            return found
    return None


class NotKeyValueCache(Exception):
    """The model's cache holds other state than attention keys and values (Mamba's
    convolution and SSM states): no graph with past key/values can carry it."""


def layer_pairs(cache: object) -> list[KeyValue]:
    """(key, value) per layer of a self-attention cache or a legacy tuple; NotKeyValueCache
    when a layer holds something else."""
    if cache is None:
        return []
    layers = getattr(cache, "layers", None)
    if layers is not None:
        other = [type(layer).__name__ for layer in layers
                 if not (hasattr(layer, "keys") and hasattr(layer, "values"))]
        if other:
            raise NotKeyValueCache(f"its cache holds {other[0]} layers, not attention keys "
                                   "and values")
        return [(layer.keys, layer.values) for layer in layers]
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    if not isinstance(cache, (tuple, list)):
        raise NotKeyValueCache(f"its cache is a {type(cache).__name__}, not attention keys "
                               "and values")
    return [(layer[0], layer[1]) for layer in cache]


def split_cache(cache: object) -> tuple[list[KeyValue], list[KeyValue]]:
    """(self-attention pairs, cross-attention pairs) of any cache the models return."""
    if hasattr(cache, "self_attention_cache") and hasattr(cache, "cross_attention_cache"):
        return layer_pairs(cache.self_attention_cache), layer_pairs(cache.cross_attention_cache)
    if isinstance(cache, (tuple, list)) and cache and len(cache[0]) == 4:
        return [(c[0], c[1]) for c in cache], [(c[2], c[3]) for c in cache]
    return layer_pairs(cache), []


def dynamic_cache(pairs: list[KeyValue]) -> DynamicCache:
    """A DynamicCache holding `pairs` (an empty one for no pairs)."""
    from transformers import DynamicCache

    if not pairs:
        return DynamicCache()
    if hasattr(DynamicCache, "from_legacy_cache"):
        return DynamicCache.from_legacy_cache(tuple(pairs))
    return DynamicCache(list(pairs))


def encoder_decoder_cache(self_pairs: list[KeyValue],
                          cross_pairs: list[KeyValue]) -> EncoderDecoderCache:
    """An EncoderDecoderCache of a decoder's own and its cross-attention key/values."""
    from transformers import EncoderDecoderCache

    return EncoderDecoderCache(dynamic_cache(self_pairs), dynamic_cache(cross_pairs))


@runtime_checkable
class CachingConfig(Protocol):
    """A transformers config that says whether the model returns a key/value cache."""

    use_cache: bool


def cache_off(config: object) -> None:
    """`config.use_cache = False` (set even on a config that does not say)."""
    config.__setattr__("use_cache", False)


def cache_configs(model: object) -> list[CachingConfig]:
    """Every config of `model` and its submodules (T5's decoder has its own copy), and every
    sub-config they hold (`decoder`, `text_config`, …), that asks for a key/value cache."""
    configs: dict[int, CachingConfig] = {}
    seen: set[int] = set()

    def visit(config: object) -> None:
        if not hasattr(config, "to_dict") or id(config) in seen:
            return
        seen.add(id(config))
        if isinstance(config, CachingConfig) and config.use_cache is True:
            configs[id(config)] = config
        for value in vars(config).values():
            visit(value)

    modules = model.modules() if hasattr(model, "modules") else ()  # not a program's
    for module in modules:
        visit(getattr(module, "config", None))
    return list(configs.values())
