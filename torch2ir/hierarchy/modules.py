"""One implementation per module *instance*, from ``named_modules()``.

Every module gets its implementation here, whether or not the trace ever reaches it
(``nn.Identity``, an eval-mode ``nn.Dropout``, ``MultiheadAttention.out_proj``): the
rebuilt model must have the same paths and state. A module registered under several
paths (``nn.Sequential(lin, lin)``) is one implementation with ``aliases``; a tensor
shared by several modules (GPT-2's ``lm_head.weight``) is recorded once and ``tie``\\ d
from the other places.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from torch import fx, nn

from common.errors import IRSerializationError
from common.ir import IR, ORIGINAL_CLASS_KEY, Implementation
from common.none_slots import none_slots
from common.quant import hook_to_data, qconfig_to_data
from common.values import encode
from torch2ir.hierarchy.tensormeta import state_record
from torch2ir.quant.int8 import packed_state

#: IR types of containers that are never called (rebuilt as the real container class).
CONTAINER_TYPES = {nn.ModuleList: "modulelist", nn.ModuleDict: "moduledict", nn.Sequential: "sequential"}
#: IR type of an implementation rebuilt from its graph (or as a bare holder of state).
GRAPH_TYPE = "module"


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class ModuleTable:
    """Maps module paths to implementation keys and builds the implementations."""

    def __init__(self, model: nn.Module, converter: Any) -> None:
        self.model = model
        self.converter = converter
        self.key_of_path: dict[str, str] = {}
        self.module_of_key: dict[str, nn.Module] = {}
        self.errors: list[tuple[str, str, str]] = []
        self._owned: dict[str, set[int]] = {}
        self._names: dict[int, list[str]] | None = None  # id(tensor) -> its names, built on first use
        self._tensor_of: dict[str, int] = {}
        self._outermost: list[str] | None = None
        first: dict[int, str] = {}
        for path, module in model.named_modules(remove_duplicate=False):
            key = path or "root"
            if id(module) in first:
                self.key_of_path[path] = first[id(module)]
                continue
            first[id(module)] = key
            self.key_of_path[path] = key
            self.module_of_key[key] = module

    def key(self, path: str) -> str | None:
        """Implementation key of the module at ``path`` (``"root"`` for ``""``)."""
        return self.key_of_path.get(path)

    def is_leaf(self, module: nn.Module) -> bool:
        return self.converter.has_handler(module)

    def leaf_type(self, module: nn.Module) -> str:
        """The IR type of the handled leaf ``module`` (by its class; an opaque view's owned modules by identity)."""
        type_of_module = getattr(self.converter, "type_of_module", None)
        return type_of_module(module) if type_of_module is not None else self.converter.type_of(type(module))

    def outermost_leaves(self) -> list[str]:
        """Paths of the handled leaves that are not inside another handled leaf (root excluded), in
        ``named_modules()`` order; read once per table."""
        if self._outermost is None:
            self._outermost = []
            inside: set[str] = set()  # paths of handled leaves and everything under them
            for path, key in self.key_of_path.items():
                if not path:
                    continue
                parent = path.rpartition(".")[0]
                if parent in inside:
                    inside.add(path)
                elif self.is_leaf(self.module_of_key[key]):
                    self._outermost.append(path)
                    inside.add(path)
        return self._outermost

    def traced_modules(self) -> list[nn.Module]:
        """The modules whose own code the trace runs: neither a handled leaf nor inside one."""
        out: dict[int, nn.Module] = {}  # a module held twice counts once
        inside: set[str] = set()  # handled leaves and everything under them (named_modules' order: parents first)
        for path, key in self.key_of_path.items():
            module = self.module_of_key[key]
            if (path and path.rpartition(".")[0] in inside) or self.is_leaf(module):
                inside.add(path)
            else:
                out.setdefault(id(module), module)
        return list(out.values())

    def owns(self, path: str, fqn: str) -> bool:
        """True when the parameter or buffer named ``fqn`` (any of its tied names) is one of the tensors of
        the module at ``path`` itself, so a call of that module reads it without an argument."""
        key = self.key(path)
        module = self.module_of_key.get(key) if key else None
        if module is None:
            return False
        if key not in self._owned:
            self._owned[key] = {id(t) for t in (*module.parameters(), *module.buffers())}
        owner, _, name = fqn.rpartition(".")
        try:
            holder = self.model.get_submodule(owner)
        except AttributeError:
            return False
        tensor = holder._parameters.get(name, holder._buffers.get(name))
        return tensor is not None and id(tensor) in self._owned[key]

    def local_name(self, path: str, fqn: str) -> str | None:
        """The name under ``path`` of the parameter or buffer ``fqn`` names (itself, or a name it is tied to there),
        or None when no module at or below ``path`` holds that tensor."""
        if not path or fqn.startswith(path + "."):
            return fqn
        if self._names is None:
            self._names = {}
            for name, tensor in (*self.model.named_parameters(remove_duplicate=False),
                                 *self.model.named_buffers(remove_duplicate=False)):
                self._names.setdefault(id(tensor), []).append(name)
            self._tensor_of = {n: t for t, names in self._names.items() for n in names}
        names = self._names.get(self._tensor_of.get(fqn, -1), ())
        return next((n for n in names if n.startswith(path + ".")), None)

    def build(self, called: set[str]) -> IR:
        """Implementations of every module (graphs are filled in by the hierarchy)."""
        ir = IR()
        for key, module in self.module_of_key.items():
            ir.add(self._implementation(key, module, key in called))
        for path, key in self.key_of_path.items():
            if (path or "root") != key:
                ir[key].aliases.append(path)
                self._record_children(ir, path)
        self._record_state(ir)
        return ir

    def _record_children(self, ir: IR, alias: str) -> None:
        """Record the order of the children of the module ``alias`` sits in (``meta["children"]``): a rebuild attaches
        a module's aliases after its own children, and an ``nn.Sequential`` runs its children in that order
        (``Sequential(lin, act, lin, act, lin)`` with one ``act`` would run the second one last)."""
        parent_path, _, _ = alias.rpartition(".")
        parent_key = self.key_of_path.get(parent_path)
        if parent_key is None or "children" in ir[parent_key].meta:
            return
        parent = self.module_of_key[parent_key]
        ir[parent_key].meta["children"] = [n for n, m in parent._modules.items() if m is not None]

    def _implementation(self, key: str, module: nn.Module, called: bool) -> Implementation:
        cls = type(module)
        # "source": the original module path; rewrites keep it so the original state dict can be remapped
        meta = {"class": original_class(module), "training": module.training, "source": key}
        self._quant_meta(key, module, meta)
        if self.is_leaf(module):
            try:
                data = self.converter.attributes(module)
                encode(data, f"implementations[{key!r}]")
            except IRSerializationError as exc:
                self.errors.append((key, f"handler for {cls.__name__} returned an unserializable attribute: "
                                    f"{exc.message}", "make the handler return JSON-able constructor arguments"))
                data = {}
            except Exception as exc:  # noqa: BLE001 - a user's handler may fail in any way
                self.errors.append((key, f"handler for {cls.__name__} failed: {type(exc).__name__}: {exc}",
                                    "fix or override the handler for this class"))
                data = {}
            return Implementation(key, self.leaf_type(module), data, meta=meta)
        if cls in CONTAINER_TYPES:
            none_slots(module, meta)  # ModuleList([conv, None]): the None slot is kept (zip() over it stops there)
        if cls in CONTAINER_TYPES and not called:
            return Implementation(key, CONTAINER_TYPES[cls], meta=meta)
        return Implementation(key, GRAPH_TYPE, meta=meta)

    def _quant_meta(self, key: str, module: nn.Module, meta: dict[str, Any]) -> None:
        """``meta["qconfig"]`` of a module with a ``qconfig`` and ``meta["observer_hook"]`` of a handled leaf
        with the observer hook of ``torch.ao.quantization.prepare`` (see :mod:`common.quant`)."""
        qconfig = getattr(module, "qconfig", None)
        if qconfig is not None:
            try:
                meta["qconfig"] = qconfig_to_data(qconfig)
            except ValueError as exc:
                self.errors.append((key, f"{type(module).__name__}.qconfig cannot be recorded: {exc}",
                                    "use observers and fake-quantize classes of torch.ao.quantization (common.quant."
                                    "CLASSES) in the qconfig, or set qconfig = None before converting"))
        if self.is_leaf(module) and (hook := hook_to_data(module)) is not None:
            meta["observer_hook"] = hook

    def _record_state(self, ir: IR) -> None:
        """Parameters and buffers of every module. A buffer is recorded persistent only when the model's
        ``state_dict()`` really holds it: a library that keeps registered buffers out of its state dict (brevitas'
        constants, by ``_save_to_state_dict`` overrides) gets them recorded as non-persistent, so their values
        travel with the IR (``ir.tensors``) and a rebuild from ``state_dict()`` has them, or names them."""
        saved = set(self.model.state_dict(keep_vars=True))
        owner: dict[int, str] = {}
        for key, module in self.module_of_key.items():
            prefix = "" if key == "root" else key + "."
            records = ir[key].state
            for name, param in module._parameters.items():
                if param is None:
                    continue
                rec = state_record(param, "parameter", requires_grad=param.requires_grad)
                if prefix + name not in saved:  # left out of its module's state dict: its value travels in the IR
                    rec["persistent"] = False
                tie = owner.setdefault(id(param), prefix + name)
                if tie != prefix + name:
                    rec["tie"] = tie
                records[name] = rec
            for name, buf in module._buffers.items():
                if buf is None:
                    continue
                persistent = name not in module._non_persistent_buffers_set and prefix + name in saved
                rec = state_record(buf, "buffer", persistent=persistent)
                tie = owner.setdefault(id(buf), prefix + name)
                if tie != prefix + name:
                    rec["tie"] = tie
                records[name] = rec
            for name, tensor in packed_state(module).items():  # an int8 module's packed weights, unpacked
                records[name] = state_record(tensor, "buffer", persistent=True)


def original_class(module: nn.Module) -> str:
    """The class a module stands for: its own, or, for a module rebuilt by ir2torch from a graph, the class
    recorded in the IR it was rebuilt from (so converting a rebuilt model gives back the same IR)."""
    recorded = getattr(module, "meta", None)
    if isinstance(module, fx.GraphModule) and isinstance(recorded, dict):
        name = recorded.get(ORIGINAL_CLASS_KEY)
        if isinstance(name, str):
            return name
    return class_name(type(module))


def enclosing_path(path: str, roots: Collection[str]) -> str | None:
    """The outermost of ``roots`` (module paths) that ``path`` lies strictly below, or None (one set lookup per
    level of ``path``: a scan of every root for every module is quadratic in a deep stack)."""
    parts = path.split(".")
    for cut in range(1, len(parts)):
        prefix = ".".join(parts[:cut])
        if prefix in roots:
            return prefix
    return None


def paths_below(paths: Iterable[str], roots: Collection[str]) -> dict[str, list[str]]:
    """``{root: [every path of ``paths`` that is ``root`` or below it, in their order]}`` (one pass, one set
    lookup per level of each path)."""
    out: dict[str, list[str]] = {r: [] for r in roots}
    for path in paths:
        parts = path.split(".")
        for cut in range(1, len(parts) + 1):
            prefix = ".".join(parts[:cut])
            if prefix in out:
                out[prefix].append(path)
    return out
