"""The node model: which nodes can take GPU pods, with what GPUs, and where they sit in each topology.

Read from a Kubernetes Node object exactly as `kubectl get nodes -o yaml` prints it:
GPU count from `status.allocatable["nvidia.com/gpu"]`, model from the GPU Feature
Discovery label `nvidia.com/gpu.product`, device memory from `nvidia.com/gpu.memory`
(MiB) or else the declared `gpu` model's memory.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Mapping, NamedTuple, Sequence

from lang.quantity import QuantityError, to_int, to_milli

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per device (GFD)
UNKNOWN_MODEL = "unknown"
# The device plugin taints GPU nodes with this key and the ExtendedResourceToleration
# admission plugin adds the toleration to every pod that requests nvidia.com/gpu.
DEFAULT_TOLERATED = frozenset({GPU_RESOURCE})
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

MAX_NODE_GPUS = 1024  # devices one node may state; a larger count is malformed (real nodes have at most 16)
UNLIMITED = 1 << 62  # an allocatable the Node does not state: never the resource that runs out
Levels = Sequence[tuple[str, str]]  # (level name, node label key), widest first
_EMPTY: Mapping = {}


class NodeSpec(NamedTuple):
    """What placement needs of one node: eligibility, GPUs, and its label path per topology."""

    # A NamedTuple, not a frozen dataclass: 256k of these are built at load, and tuple
    # construction is several times cheaper than a frozen dataclass's __init__.
    # A node with blocking taints is eligible only for gangs that tolerate them: its
    # `model` is then the variant key `MODEL|key=value:Effect,…` (see `taint_variant`).

    name: str
    eligible: bool
    why_not: str | None  # "cordoned", "NotReady", "tainted key=value:NoSchedule", None when eligible
    model: str  # declared model name when the product is declared, else the raw product
    gpus: int  # whole physical devices
    memory: int  # bytes per device (0 when unknown)
    paths: tuple[tuple[str, ...] | None, ...]  # per topology: label values widest first; None if a label is missing
    taints: tuple[tuple[str, str, str], ...] = ()  # blocking (key, value, effect) the device-plugin default does not cover
    # What the scheduler counts besides GPUs (`status.allocatable`); UNLIMITED when the Node does not say
    # (a partial object, e.g. a hand-written fixture: not modelled rather than full).
    cpu: int = UNLIMITED  # millicores
    ram: int = UNLIMITED  # bytes of host memory
    pods: int = UNLIMITED  # pod slots
    labels: Mapping = {}  # the Node's labels (the object's own dict, not a copy), for nodeSelector and affinity


TAINT_SEP = "|"
_NEW_SPEC = tuple.__new__


def taint_variant(model: str, taints: tuple[tuple[str, str, str], ...]) -> str:
    """The model key of nodes of `model` carrying these blocking taints."""
    return model + TAINT_SEP + ",".join(f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in taints)


class Toleration(Mapping):
    """The fields of one toleration that placement matches on, hashable (a pod's tolerations are part of a gang query).

    GPU pods almost always carry one (the ExtendedResourceToleration plugin adds
    `nvidia.com/gpu: Exists`): as plain dicts they made every gang query unhashable,
    so the index could never re-use an answer for them.
    """

    __slots__ = ("_items",)
    FIELDS = ("key", "operator", "value", "effect")

    def __init__(self, toleration: Mapping) -> None:
        items = []
        for name in self.FIELDS:
            value = toleration.get(name)
            if value is not None:
                try:
                    hash(value)
                except TypeError:  # a malformed value (a list, a map): matched as its text, like `tolerates` does
                    value = str(value)
                items.append((name, value))
        self._items = tuple(items)

    def __getitem__(self, name: str):
        for k, v in self._items:
            if k == name:
                return v
        raise KeyError(name)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other) -> bool:
        return dict(self._items) == dict(other) if isinstance(other, Mapping) else NotImplemented

    def __repr__(self) -> str:
        return f"Toleration({dict(self._items)!r})"


def tolerates(tolerations, taint: tuple[str, str, str]) -> bool:
    """Kubernetes toleration matching: key (empty + Exists = every key), operator Equal/Exists, value, effect."""
    key, value, effect = taint
    for t in tolerations or ():
        if not is_map(t):
            continue
        t_key, op = t.get("key") or "", t.get("operator") or "Equal"
        if t_key and t_key != key:
            continue
        if not t_key and op != "Exists":
            continue
        if op == "Equal" and str(t.get("value") or "") != value:
            continue
        if t.get("effect") and t.get("effect") != effect:
            continue
        return True
    return False


def is_map(value) -> bool:
    """A JSON object: decoded input holds dicts, so test that first (typing's Mapping isinstance costs microseconds)."""
    # An absent field (None) is the next most common value: answered without the ABC check too.
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def mapping(value) -> Mapping:
    """`value` when it is a mapping, else an empty one: odd input never raises."""
    return value if is_map(value) else _EMPTY


def model_key(product: str | None, gpu_models: Mapping[str, tuple[str, int]]) -> str:
    """The model key a product label value (or declared model name) stands for."""
    if not product:
        return UNKNOWN_MODEL
    hit = gpu_models.get(product)
    return hit[0] if hit else str(product)


def _ready(status: Mapping) -> bool:
    conditions = status.get("conditions")
    for cond in conditions if type(conditions) is list or isinstance(conditions, list) else ():
        if (type(cond) is dict or is_map(cond)) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False  # a node that never reported Ready is not schedulable


def _blocking_taints(spec: Mapping, tolerated: frozenset[str]) -> tuple[tuple[str, str, str], ...]:
    taints = spec.get("taints")
    if type(taints) is list and len(taints) == 1:  # the usual GPU node: the device plugin's taint alone
        taint = taints[0]
        if type(taint) is dict:
            key, effect = taint.get("key"), taint.get("effect")
            if type(key) is str and type(effect) is str and (key in tolerated or effect not in _BLOCKING_EFFECTS):
                return ()
    out = []
    for taint in taints if isinstance(taints, list) else ():
        if type(taint) is not dict and not is_map(taint):
            continue
        effect = taint.get("effect")
        if effect != "NoSchedule" and effect != "NoExecute":  # `==`, not `in` a set: an unhashable effect never raises
            continue
        key = taint.get("key")
        if type(key) is not str:
            key = str(key or "")
        if key in tolerated:
            continue
        value = taint.get("value")
        out.append((key, value if type(value) is str else str(value or ""), "NoSchedule" if effect == "NoSchedule" else "NoExecute"))
    return tuple(sorted(set(out))) if len(out) > 1 else tuple(out)


def _gpu_count(allocatable: Mapping, status: Mapping) -> int:
    raw = allocatable.get(GPU_RESOURCE)
    if raw is None:
        raw = mapping(status.get("capacity")).get(GPU_RESOURCE)
    if raw is None:
        return 0
    if type(raw) is int or (isinstance(raw, str) and raw.isdigit()):
        n = int(raw)  # the usual form; exact parsing below handles the rest
    else:
        try:
            n = max(0, to_int(str(raw)))
        except QuantityError:
            return 0
    # More devices than any node has is a malformed count (`100Gi`): not tracked, as a malformed quantity, rather than
    # a packed histogram field per device (aggregates.reserve_devices) that would take gigabytes.
    return n if n <= MAX_NODE_GPUS else 0


_ALLOCATABLE: dict[tuple[str, bool], int] = {}  # (text, milli) -> value: nodes of a pool state the same amounts


def _allocatable(allocatable: Mapping, name: str, milli: bool) -> int:
    raw = allocatable.get(name)
    if raw is None:
        return UNLIMITED
    text = raw if type(raw) is str else str(raw)
    hit = _ALLOCATABLE.get((text, milli))  # one int object per distinct amount, not per node: fewer cold objects per event
    if hit is None:
        try:
            hit = max(0, to_milli(text) if milli else to_int(text))
        except QuantityError:
            hit = 0  # a malformed allocatable takes nothing
        if len(_ALLOCATABLE) < 4096:
            _ALLOCATABLE[(text, milli)] = hit
    return hit


def _memory(labels: Mapping, model: str, product: str | None, gpu_models: Mapping[str, tuple[str, int]]) -> int:
    raw = labels.get(MEMORY_LABEL)
    if raw is not None:
        try:
            return max(0, int(str(raw))) * 2**20
        except ValueError:
            pass
    hit = gpu_models.get(product or "")
    return hit[1] if hit else 0


def read_node(
    node: Mapping,
    topologies: Sequence[tuple[str, Levels]],
    gpu_models: Mapping[str, tuple[str, int]],
    tolerated: frozenset[str] = DEFAULT_TOLERATED,
    prev: NodeSpec | None = None,
) -> NodeSpec:
    """The placement view of one Node object (never raises on odd input); `prev`, the node's last view, lends its label
    paths and device memory when the labels are unchanged (most node events change no label)."""
    # Every node event (heartbeats too) reads the whole view: decoded objects are dicts, tested with `type` first.
    meta = node.get("metadata")
    if type(meta) is not dict:
        meta = mapping(meta)
    spec = node.get("spec")
    if type(spec) is not dict:
        spec = mapping(spec)
    status = node.get("status")
    if type(status) is not dict:
        status = mapping(status)
    labels = meta.get("labels")
    if type(labels) is not dict:
        labels = mapping(labels)
    name = meta.get("name")
    name = name if type(name) is str else str(name or "")
    product = labels.get(PRODUCT_LABEL)
    if product is not None and not isinstance(product, str):
        product = str(product)
    model = model_key(product, gpu_models)
    taints: tuple[tuple[str, str, str], ...] = ()
    if spec.get("unschedulable"):
        why_not = "cordoned"
    elif not _ready(status):
        why_not = "NotReady"
    else:
        why_not = None
        taints = _blocking_taints(spec, tolerated) if spec.get("taints") else ()
    if taints:
        model = _variant(model, taints)
    if prev is not None and (labels is prev.labels or labels == prev.labels):
        memory, paths = prev.memory, prev.paths  # both read only the labels (and the declared models: fixed per index)
    else:
        memory = _memory(labels, model, product, gpu_models)
        paths = _paths(labels, topologies)
    alloc = status.get("allocatable")
    if type(alloc) is not dict:
        alloc = mapping(alloc)
    gpus = _gpu_count(alloc, status)
    if gpus <= 0:  # not tracked: skip reading the rest
        return NodeSpec(name, why_not is None, why_not, model, gpus, memory, paths, taints)
    cpu, ram, pods = _amounts(alloc)
    # tuple.__new__ directly: every node event builds one, and NamedTuple's generated __new__ is one more Python call
    return _NEW_SPEC(NodeSpec, (name, why_not is None, why_not, model, gpus, memory, paths, taints, cpu, ram, pods, labels))


UNSEEN = object()  # a raw part never compared yet: equal to nothing


def reread(
    state,
    node: Mapping,
    meta: Mapping,
    topologies: Sequence[tuple[str, Levels]],
    gpu_models: Mapping[str, tuple[str, int]],
    tolerated: frozenset[str] = DEFAULT_TOLERATED,
) -> NodeSpec | None:
    """The new view of a node already tracked (`state.spec`, with GPUs), or None when nothing placement reads changed.

    Equal to `read_node(node, ...)` whenever not None (property-tested), but each part is compared first with what the
    last view was read from — the labels dict (`state.spec.labels`), the taints list and the allocatable dict
    (`state.taints_raw`, `state.alloc_raw`, kept here) — and only a part that differs is read again: a heartbeat costs a
    few C-level compares and the Ready look-up, a cordon or a taint reads no label, no amount and no path.
    """
    prev = state.spec
    spec = node.get("spec")
    if type(spec) is not dict:
        spec = mapping(spec)
    status = node.get("status")
    if type(status) is not dict:
        status = mapping(status)
    alloc = status.get("allocatable")
    if type(alloc) is not dict or alloc.get(GPU_RESOURCE) is None:
        state.taints_raw = state.alloc_raw = UNSEEN  # the GPU count may come from elsewhere: read it all
        new = read_node(node, topologies, gpu_models, tolerated, prev)
        return None if new == prev else new
    # the last view's fields by position, unpacked once: a NamedTuple attribute is a descriptor call per read
    name, _e, prev_why, prev_model, prev_gpus, prev_memory, prev_paths, prev_taints, prev_cpu, prev_ram, prev_pods, prev_labels = prev
    labels = meta.get("labels")
    if type(labels) is not dict:
        labels = mapping(labels)
    taints = spec.get("taints")
    if spec.get("unschedulable"):
        why_not = "cordoned"
    else:
        why_not = "NotReady"  # `_ready`, inlined: every event of every node asks
        conditions = status.get("conditions")
        for cond in conditions if type(conditions) is list or isinstance(conditions, list) else ():
            if (type(cond) is dict or is_map(cond)) and cond.get("type") == "Ready":
                if cond.get("status") == "True":
                    why_not = None
                break
    same_taints = taints is state.taints_raw or taints == state.taints_raw
    state.taints_raw = taints
    if why_not is not None:
        blocking = ()
    elif same_taints and prev_why is None:
        blocking = prev_taints  # read from these taints when the node was last eligible
    else:
        blocking = _blocking_taints(spec, tolerated) if taints else ()
    same_labels = labels is prev_labels or labels == prev_labels
    same_alloc = alloc is state.alloc_raw or alloc == state.alloc_raw
    state.alloc_raw = alloc
    if same_labels and same_alloc and why_not == prev_why and (blocking is prev_taints or blocking == prev_taints):
        return None  # a status heartbeat (or an equal object): nothing placement reads changed
    if same_labels:
        labels, memory, paths = prev_labels, prev_memory, prev_paths  # the dict the counts hold, not an equal copy
        model = prev_model if blocking is prev_taints or blocking == prev_taints else None
    else:
        model = None
    if model is None:
        product = labels.get(PRODUCT_LABEL)
        if product is not None and not isinstance(product, str):
            product = str(product)
        model = model_key(product, gpu_models)
        if not same_labels:
            memory = _memory(labels, model, product, gpu_models)
            paths = _paths(labels, topologies)
            if paths == prev_paths:
                paths = prev_paths  # the same objects when equal: the index tells "same domains" by identity first
        if blocking:
            model = _variant(model, blocking)
        if not same_labels and model == prev_model:
            model = prev_model  # (likewise "same key": a decoded product label is an equal string, not the same)
    if same_alloc:
        gpus, cpu, ram, pods = prev_gpus, prev_cpu, prev_ram, prev_pods
    else:
        amounts = alloc.get(GPU_RESOURCE), alloc.get("cpu"), alloc.get("memory"), alloc.get("pods")
        try:
            hit = _AMOUNTS4.get(amounts)  # nodes of a pool state the same four amounts: one look-up
        except TypeError:  # an unhashable amount (odd input)
            hit = None
        if hit is None:
            gpus = _gpu_count(alloc, status)
            if gpus <= 0:
                return read_node(node, topologies, gpu_models, tolerated, prev)  # no longer tracked: the short view
            hit = (gpus, *_amounts(alloc))
            if len(_AMOUNTS4) < 4096 and all(type(a) is str for a in amounts):
                _AMOUNTS4[amounts] = hit
        gpus, cpu, ram, pods = hit
    new = _NEW_SPEC(NodeSpec, (name, why_not is None, why_not, model, gpus, memory, paths, blocking, cpu, ram, pods, labels))
    return None if new == prev else new  # e.g. a taint placement ignores, or an allocatable it does not read


def keep_raw(state, node: Mapping) -> None:
    """Remember the taints list and allocatable dict `state.spec` was just read from (`read_node`), for `reread`."""
    try:  # (the views compare by content: any part stored is sound, and one never compared equal costs a full read)
        state.taints_raw = node["spec"].get("taints")
        state.alloc_raw = node["status"]["allocatable"]
    except (KeyError, TypeError, AttributeError):  # odd input: read in full next time
        state.taints_raw = state.alloc_raw = UNSEEN


def _paths(labels: Mapping, topologies: Sequence[tuple[str, Levels]]) -> tuple[tuple[str, ...] | None, ...]:
    try:
        getters = _PATH_GETTERS.get(topologies)  # the index's topologies: a tuple, so one hashable key
    except TypeError:
        getters = None
    if getters is None:
        getters = tuple(itemgetter(*[label for _level, label in levels]) if levels else _NO_LEVELS for _name, levels in topologies)
        if len(_PATH_GETTERS) < 64 and type(topologies) is tuple:
            _PATH_GETTERS[topologies] = getters
    paths = []
    for (_name, levels), get in zip(topologies, getters):
        try:
            values = get(labels)  # C-level: every label of the topology, or KeyError
        except KeyError:
            paths.append(None)  # Kueue likewise ignores nodes lacking any level label of a topology
            continue
        if len(levels) == 1:
            values = (values,)
        elif not levels:
            paths.append(values)
            continue
        for v in values:
            if type(v) is not str:  # odd values: None is a missing label, the rest their text
                values = None if None in values else tuple(v if type(v) is str else str(v) for v in values)
                break
        paths.append(values)
    return tuple(paths)


_PATH_GETTERS: dict = {}  # topologies -> one itemgetter of its level labels per topology


def _NO_LEVELS(labels: Mapping) -> tuple:
    return ()


_VARIANTS: dict[tuple[str, tuple], str] = {}  # (model, blocking taints) -> variant key: pools share a few


def _variant(model: str, taints: tuple[tuple[str, str, str], ...]) -> str:
    key = (model, taints)
    hit = _VARIANTS.get(key)
    if hit is None:
        hit = taint_variant(model, taints)
        if len(_VARIANTS) < 4096:
            _VARIANTS[key] = hit
    return hit


def _amounts(alloc: Mapping) -> tuple[int, int, int]:
    """(cpu millicores, memory bytes, pod slots) allocatable, UNLIMITED where unstated; one look-up for the usual node."""
    cpu, ram, pods = alloc.get("cpu"), alloc.get("memory"), alloc.get("pods")
    if type(cpu) is str and type(ram) is str and type(pods) is str:
        key = (cpu, ram, pods)
        hit = _AMOUNTS.get(key)
        if hit is None:
            hit = (_allocatable(alloc, "cpu", True), _allocatable(alloc, "memory", False), _allocatable(alloc, "pods", False))
            if len(_AMOUNTS) < 4096:
                _AMOUNTS[key] = hit
        return hit
    return _allocatable(alloc, "cpu", True), _allocatable(alloc, "memory", False), _allocatable(alloc, "pods", False)


_AMOUNTS: dict[tuple[str, str, str], tuple[int, int, int]] = {}  # nodes of a pool state the same three amounts
_AMOUNTS4: dict[tuple, tuple[int, int, int, int]] = {}  # (gpu, cpu, memory, pods) texts -> (gpus, cpu, ram, pods) with gpus > 0
