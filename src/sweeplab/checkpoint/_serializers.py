"""Serializers (bytes, json, torch, pickle, numpy; `register_serializer` adds one) and the "auto" choice."""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO, Protocol, runtime_checkable

from sweeplab._imports import optional_import
from sweeplab.checkpoint._common import _AUTO, _DIR_FORMAT
from sweeplab.errors import ConfigError


# ---------------------------------------------------------------------------------------------- serializers
@runtime_checkable
class Serializer(Protocol):
    """Turns an object into bytes on a binary file object and back. `suffix` (optional) names the payload."""

    name: str

    def dump(self, obj: Any, fileobj: BinaryIO) -> None: ...

    def load(self, fileobj: BinaryIO) -> Any: ...


class _BytesSerializer:
    name, suffix = "bytes", ".bin"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, bytearray or memoryview, got {type(obj).__name__}")
        fileobj.write(obj)

    def load(self, fileobj: BinaryIO) -> Any:
        return fileobj.read()


class _JsonSerializer:
    name, suffix = "json", ".json"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        fileobj.write(json.dumps(obj, separators=(",", ":")).encode("utf-8"))

    def load(self, fileobj: BinaryIO) -> Any:
        return json.loads(fileobj.read().decode("utf-8"))


class _PickleSerializer:
    """Only for data sweeplab wrote itself: the manager unpickles only after the manifest checksum matches."""

    name, suffix = "pickle", ".pkl"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        pickle.dump(obj, fileobj, protocol=pickle.HIGHEST_PROTOCOL)

    def load(self, fileobj: BinaryIO) -> Any:
        return pickle.load(fileobj)  # only after the manifest checksum matched, see the module docstring


class _NumpySerializer:
    """A dict of arrays as an .npz archive (no pickled objects)."""

    name, suffix = "numpy", ".npz"

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        import numpy as np

        if not _is_array_dict(obj):
            raise TypeError("expected a dict of str -> numpy array (non-object dtype)")
        np.savez(fileobj, **obj)  # type: ignore[arg-type]

    def load(self, fileobj: BinaryIO) -> Any:
        import numpy as np

        with np.load(fileobj, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}


class _TorchSerializer:
    """torch.save / torch.load(weights_only=True). Modules, optimizers and schedulers are saved as their
    state_dict (a DDP/DataParallel/compiled wrapper is unwrapped first). Loads onto `map_location`."""

    name, suffix = "torch", ".pt"

    def __init__(self, map_location: Any = "cpu") -> None:
        self.map_location = map_location

    def dump(self, obj: Any, fileobj: BinaryIO) -> None:
        torch = optional_import("torch", "torch", "torch checkpoints")
        torch.save(_to_state(obj, torch), fileobj)

    def load(self, fileobj: BinaryIO) -> Any:
        torch = optional_import("torch", "torch", "torch checkpoints")
        return torch.load(fileobj, map_location=self.map_location, weights_only=True)


SERIALIZERS: dict[str, Serializer] = {
    s.name: s
    for s in (_BytesSerializer(), _JsonSerializer(), _TorchSerializer(), _PickleSerializer(), _NumpySerializer())
}


def register_serializer(serializer: Serializer) -> None:
    """Add (or replace) a serializer under `serializer.name`; the format name is recorded in each manifest."""
    name = getattr(serializer, "name", None)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError("a serializer needs a simple string `name`", value=name,
                          expected="letters, digits, '_', '.', '-'")
    if name in (_AUTO, _DIR_FORMAT):
        raise ConfigError("this serializer name is reserved", value=name)
    if not (callable(getattr(serializer, "dump", None)) and callable(getattr(serializer, "load", None))):
        raise ConfigError(f"serializer {name!r} needs dump(obj, fileobj) and load(fileobj) methods")
    SERIALIZERS[name] = serializer


def _suffix(serializer: Serializer) -> str:
    return str(getattr(serializer, "suffix", "") or f".{serializer.name}")


def _is_torch_object(x: Any, torch: Any) -> bool:
    if isinstance(x, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
        return True
    return type(x).__module__.startswith("torch") and callable(getattr(x, "state_dict", None))


def _contains_torch(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:  # nothing can hold a tensor if torch was never imported
        return False
    stack = [obj]
    while stack:
        x = stack.pop()
        if _is_torch_object(x, torch):
            return True
        if isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return False


def _to_state(obj: Any, torch: Any) -> Any:
    """Replace modules / optimizers / schedulers (at any depth of dicts, lists, tuples) by their state_dict."""
    if isinstance(obj, torch.nn.Module):
        while isinstance(obj, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            obj = obj.module
        obj = getattr(obj, "_orig_mod", obj)  # torch.compile wrapper
        return obj.state_dict()
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, Mapping):
        return {k: _to_state(v, torch) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_to_state(v, torch) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    if _is_torch_object(obj, torch):
        return obj.state_dict()
    return obj


def _is_jsonable(obj: Any) -> bool:
    """True when JSON round-trips `obj` exactly (no tuples, no non-str keys, no other types)."""
    stack = [obj]
    while stack:
        x = stack.pop()
        if x is None or type(x) in (str, int, float, bool):
            continue
        if type(x) is dict:
            if not all(type(k) is str for k in x):
                return False
            stack.extend(x.values())
        elif type(x) is list:
            stack.extend(x)
        else:
            return False
    return True


def _is_array_dict(obj: Any) -> bool:
    np = sys.modules.get("numpy")
    if np is None or not isinstance(obj, dict) or not obj:
        return False
    return all(
        isinstance(k, str) and isinstance(v, np.ndarray) and v.dtype != object for k, v in obj.items()
    )


def _is_directory(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike)) and os.path.isdir(obj)


def _pick_format(obj: Any) -> str:
    """The "auto" choice, in order: directory, bytes, torch, json, numpy, pickle."""
    if _is_directory(obj):
        return _DIR_FORMAT
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return "bytes"
    if _contains_torch(obj):
        return "torch"
    if _is_jsonable(obj):
        return "json"
    if _is_array_dict(obj):
        return "numpy"
    return "pickle"
