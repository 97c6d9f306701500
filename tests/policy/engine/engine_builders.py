"""Small builders of IR blocks and subjects for the engine's table tests (no parser needed)."""

from __future__ import annotations

from lang import ir
from lang.span import Span
from policy.subject.model import Workload

S = Span("t.policy", 1, 1, 1, 2)


def span(line: int) -> Span:
    """A span at `line` of t.policy."""
    return Span("t.policy", line, 1, line, 2)


def lit(value, type_: ir.Type) -> ir.Lit:
    """A literal of a type."""
    return ir.Lit(value, type_, S)


def field(name: str) -> ir.Field:
    """A subject field."""
    return ir.Field(name, ir.SUBJECT_FIELDS[name], S)


def index(target: str, key: str) -> ir.Index:
    """`labels["key"]`."""
    return ir.Index(field(target), key, S)


def cmp(op: str, left: ir.Expr, right: ir.Expr) -> ir.Compare:
    """`left op right`."""
    return ir.Compare(op, left, right, S)


def eq(name: str, value: str) -> ir.Compare:
    """`field == "value"` for a string field."""
    return cmp("==", field(name), lit(value, ir.Type.STRING))


def ns_is(namespace: str) -> ir.Compare:
    """`namespace == "…"`."""
    return eq("namespace", namespace)


def gpus_gt(milli: int) -> ir.Compare:
    """`gpus > milli`."""
    return cmp(">", field("gpus"), lit(milli, ir.Type.GPU))


def tpl(*parts) -> ir.Template:
    """A message template of strings and expressions."""
    return ir.Template(tuple(parts), S)


def quota(name, *, selector=None, cohort=None, gpus=None, per_model=(), gpu_memory=None, borrow=None, lend=None, mode="enforce", line=1):
    """A quota block (amounts in milli-GPU / bytes)."""
    return ir.Quota(name, selector, cohort, gpus, tuple(per_model), gpu_memory, borrow, lend, mode, span(line))


def fraction(name, *, selector=None, min=None, max=None, memory_floor=None, per_gpu=None, mode="enforce"):
    """A fraction block."""
    return ir.Fraction(name, selector, min, max, memory_floor, per_gpu, mode, S)


def priority(name, value, *, preempts=False, default=False, line=1):
    """A priority class declaration."""
    return ir.Priority(name, value, preempts, default, span(line))


def agents(name="agents", *, identity=None, allows=(), denies=(), mode="enforce"):
    """An agents block."""
    return ir.Agents(name, identity, tuple(allows), tuple(denies), mode, S)


def allow(ops, resources, when=None):
    """`allow OPS RESOURCES [when …]`."""
    return ir.AgentAllow(frozenset(ops), frozenset(resources), when, S)


def deny(when=None, message=None):
    """`deny [when …] ["message"]`."""
    return ir.AgentDeny(when, message, S)


def rule(name, *, selector=None, when=None, actions=(), mode="enforce"):
    """A rule block."""
    return ir.Rule(name, selector, when, tuple(actions), mode, S)


def gang(name, *, selector=None, require_min_members=True, topology=(), on_unplaceable="deny", mode="enforce"):
    """A gang block."""
    return ir.Gang(name, selector, require_min_members, tuple(topology), on_unplaceable, mode, S)


H100 = ir.GpuModel("h100", "NVIDIA-H100-80GB-HBM3", 80 * 2**30, S)
L4 = ir.GpuModel("l4", "NVIDIA-L4", 24 * 2**30, S)
FABRIC = ir.Topology(
    "fabric",
    (
        ir.TopologyLevel("block", "topology.acme.io/block", S),
        ir.TopologyLevel("rack", "topology.acme.io/rack", S),
        ir.TopologyLevel("host", "kubernetes.io/hostname", S),
    ),
    S,
)


def policy(**blocks) -> ir.PolicySet:
    """A PolicySet with the two contract GPU models and the fabric topology by default."""
    blocks.setdefault("gpus", (H100, L4))
    blocks.setdefault("topologies", (FABRIC,))
    return ir.PolicySet(**{k: tuple(v) for k, v in blocks.items()})


def pod(name="p", namespace="team-a", *, gpus=None, labels=None, annotations=None, priority_class=None, spec=None) -> dict:
    """A Pod manifest; `gpus` whole devices on one container."""
    container = {"name": "main", "image": "busybox"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    body = {"containers": [container], **(spec or {})}
    if priority_class:
        body["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def workload(*, gpus=0, pods=1, obj=None, **kw) -> Workload:
    """A normalized subject; total_gpus = pods × gpus; `obj` defaults to a pod manifest."""
    kw.setdefault("kind", "Pod")
    kw.setdefault("namespace", "team-a")
    kw.setdefault("name", "p")
    if obj is None and kw["kind"] == "Pod":
        obj = pod(kw["name"], kw["namespace"])
    return Workload(gpus=gpus, pods=pods, total_gpus=gpus * pods, obj=obj, **kw)
