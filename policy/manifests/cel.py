"""CEL for webhook `matchConditions`: agent identities, GPU pods, namespace pins.

The API server evaluates these before calling Allot, so each expression must be an
over-approximation of what the policies can act on (never hide a request from a
block that would deny it) and must not fail at runtime: with failurePolicy Fail a
CEL error rejects the request. Hence the `has()` guards on optional fields, and
operation guards before `object` (null on DELETE) and `oldObject` (null on CREATE).
"""

from __future__ import annotations

import json
import re

from lang import ir
from policy.manifests.scope import NamespaceScope
from policy.subject.dialects.workloads import RESOURCES as WORKLOAD_RESOURCES

USERNAME = "request.userInfo.username"
GROUPS = "request.userInfo.groups"
SA_PREFIX = "system:serviceaccount:"

# Extended-resource prefixes that ask for a GPU (whole, MIG, HAMi vGPU: policy/dialects).
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")
# KAI scheduler fractional-GPU annotations (policy/dialects/kai.py).
GPU_ANNOTATIONS = ("gpu-fraction", "gpu-memory")


def cel_string(text: str) -> str:
    """A CEL string literal for `text` (JSON escapes are valid CEL escapes)."""
    return json.dumps(text)


def _class_char(c: str) -> str:
    return "\\" + c if c in "\\^[]-" else c


def _char_class(body: str, negate: bool) -> str:
    """An fnmatch `[...]` body as an RE2 class; reversed ranges match nothing, as in fnmatch."""
    items, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = body[k], body[k + 2]
            if lo <= hi:
                items.append(f"{_class_char(lo)}-{_class_char(hi)}")
            k += 3
        else:
            items.append(_class_char(body[k]))
            k += 1
    if not items:  # `[\s\S]` is any character in both RE2 and Python; its negation none
        return "[\\s\\S]" if negate else "[^\\s\\S]"
    return f"[{'^' if negate else ''}{''.join(items)}]"


def glob_to_re2(glob: str) -> str:
    """An anchored RE2 regex (also valid Python `re`) matching what fnmatch matches for `glob`."""
    out, i, n = [], 0, len(glob)
    while i < n:
        ch = glob[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + 1
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: fnmatch treats '[' literally
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : j]
                negate = body.startswith("!")
                out.append(_char_class(body[1:] if negate else body, negate))
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    # (?s): fnmatch's '*' also matches newlines; RE2's '.' does not by default.
    return "(?s)^" + "".join(out) + "$"


def glob_cel(target: str, glob: str) -> str:
    """CEL testing `target` against a glob: ==, startsWith or endsWith when exact, else matches()."""
    wild = [k for k, ch in enumerate(glob) if ch in "*?["]
    if not wild:
        return f"{target} == {cel_string(glob)}"
    if wild == [len(glob) - 1] and glob.endswith("*"):
        return f"{target}.startsWith({cel_string(glob[:-1])})"
    if wild == [0] and glob.startswith("*"):
        return f"{target}.endsWith({cel_string(glob[1:])})"
    return f"{target}.matches({cel_string(glob_to_re2(glob))})"


# ---- agent identities -----------------------------------------------------------


def _field(e: ir.Expr) -> str | None:
    return e.name if isinstance(e, ir.Field) else None


def _fallback(positive: bool) -> str:
    # Untranslatable: over-approximate where the expression selects, under-approximate under a `not`.
    return "true" if positive else "false"


def _user_cel(e: ir.Expr, positive: bool) -> str | None:
    """CEL for a comparison on `user`, or None if `e` is not one."""
    guard = f"has({USERNAME})"
    if isinstance(e, ir.Matches) and _field(e.target) == "user":
        return f"({guard} && {glob_cel(USERNAME, e.pattern)})"
    if isinstance(e, ir.Compare) and e.op in ("==", "!="):
        for a, b in ((e.left, e.right), (e.right, e.left)):
            if _field(a) == "user" and isinstance(b, ir.Lit) and isinstance(b.value, str):
                return f"({guard} && {USERNAME} {e.op} {cel_string(b.value)})"
    return None


def mentions(e: ir.Expr, name: str) -> bool:
    """True when the subject field `name` occurs anywhere in `e`."""
    if isinstance(e, ir.Field):
        return e.name == name
    return any(mentions(v, name) for v in _children(e))


def _children(e: ir.Expr) -> tuple:
    if isinstance(e, (ir.And, ir.Or)):
        return e.items
    if isinstance(e, ir.Not):
        return (e.item,)
    if isinstance(e, (ir.Compare, ir.Arith)):
        return (e.left, e.right)
    if isinstance(e, (ir.Matches, ir.Has, ir.Index)):
        return (e.target,)
    if isinstance(e, ir.Contains):
        return (e.item, e.container)
    return ()


def identity_cel(expr: ir.Expr | None, positive: bool = True) -> str:
    """CEL over `request.userInfo` that holds whenever `expr` does (positive) or only when it does (negative)."""
    if expr is None:
        return _fallback(positive)
    if isinstance(expr, ir.Lit) and isinstance(expr.value, bool):
        return "true" if expr.value else "false"
    if isinstance(expr, ir.Or):
        return "(" + " || ".join(identity_cel(i, positive) for i in expr.items) + ")"
    if isinstance(expr, ir.And):
        return "(" + " && ".join(identity_cel(i, positive) for i in expr.items) + ")"
    if isinstance(expr, ir.Not):
        return f"!({identity_cel(expr.item, not positive)})"
    user = _user_cel(expr, positive)
    if user is not None:
        return user
    if (
        isinstance(expr, ir.Contains)
        and _field(expr.container) == "groups"
        and isinstance(expr.item, ir.Lit)
        and isinstance(expr.item.value, str)
    ):
        return f"(has({GROUPS}) && {cel_string(expr.item.value)} in {GROUPS})"
    if positive and mentions(expr, "serviceaccount") and not isinstance(expr, ir.Not):
        # Any test on serviceaccount is false for a non-service-account user (none compares false),
        # so the service-account username prefix is an exact-enough over-approximation.
        return f"(has({USERNAME}) && {USERNAME}.startsWith({cel_string(SA_PREFIX)}))"
    return _fallback(positive)


# ---- GPU pods -------------------------------------------------------------------


def _resources_cel(c: str) -> str:
    keys = " || ".join(f"k.startsWith({cel_string(p)})" for p in GPU_RESOURCE_PREFIXES)
    per_map = [f"(has({c}.resources.{m}) && {c}.resources.{m}.exists(k, {keys}))" for m in ("limits", "requests")]
    return f"(has({c}.resources) && ({' || '.join(per_map)}))"


def _pod_gpu_cel(o: str) -> str:
    containers = [
        f"(has({o}.spec.{kind}) && {o}.spec.{kind}.exists(c, {_resources_cel('c')}))"
        for kind in ("containers", "initContainers")
    ]
    claims = f"(has({o}.spec.resourceClaims) && size({o}.spec.resourceClaims) > 0)"
    annos = " || ".join(f"{cel_string(a)} in {o}.metadata.annotations" for a in GPU_ANNOTATIONS)
    annotated = f"(has({o}.metadata) && has({o}.metadata.annotations) && ({annos}))"
    return f"((has({o}.spec) && ({' || '.join(containers + [claims])})) || {annotated})"


def gpu_pod_cel() -> str:
    """CEL true when the pod (new object, or old object on DELETE/UPDATE) requests a GPU in any dialect."""
    # Guarded by the operation, not by `!= null`: comparing an object to null is an error in some
    # CEL implementations, and `false && error` is false in every one.
    return (
        f"(request.operation != \"DELETE\" && {_pod_gpu_cel('object')}) || "
        f"(request.operation != \"CREATE\" && {_pod_gpu_cel('oldObject')})"
    )


# ---- GPU workloads (Job, JobSet, Deployment, ...) ----------------------------------------


def _templates_gpu_cel(o: str) -> str:
    """CEL true when workload object `o` has a pod template (or TrainJob node resources) asking for a GPU, by its kind (a KAITO preset always)."""
    rs = f"{o}.spec.trainer.resourcesPerNode"
    keys = " || ".join(f"k.startsWith({cel_string(p)})" for p in GPU_RESOURCE_PREFIXES)
    trainer = " || ".join(f"(has({rs}.{m}) && {rs}.{m}.exists(k, {keys}))" for m in ("limits", "requests"))

    def ray(c: str) -> str:
        return (f"({_pod_gpu_cel(f'{c}.headGroupSpec.template')} || "
                f"(has({c}.workerGroupSpecs) && {c}.workerGroupSpecs.exists(g, {_pod_gpu_cel('g.template')})))")

    lwt = f"{o}.spec.leaderWorkerTemplate"
    by_kind = {
        "Job Deployment StatefulSet ReplicaSet": _pod_gpu_cel(f"{o}.spec.template"),
        "JobSet": f"{o}.spec.replicatedJobs.exists(j, {_pod_gpu_cel('j.template.spec.template')})",
        "LeaderWorkerSet": f"({_pod_gpu_cel(f'{lwt}.workerTemplate')} || (has({lwt}.leaderTemplate) && {_pod_gpu_cel(f'{lwt}.leaderTemplate')}))",
        "PyTorchJob": f"{o}.spec.pytorchReplicaSpecs.exists(r, {_pod_gpu_cel(f'{o}.spec.pytorchReplicaSpecs[r].template')})",
        "TrainJob": f"(has({o}.spec.trainer) && has({rs}) && ({trainer}))",
        "RayCluster": ray(f"{o}.spec"),
        "RayJob": f"(has({o}.spec.rayClusterSpec) && {ray(f'{o}.spec.rayClusterSpec')})",
        "RayService": f"(has({o}.spec.rayClusterConfig) && {ray(f'{o}.spec.rayClusterConfig')})",
        # KAITO: a custom template says its GPUs; a preset or a tuning job takes a node's GPUs, which no object field says.
        "Workspace": (f"((has({o}.inference) && (has({o}.inference.preset) || (has({o}.inference.template) && "
                      f"{_pod_gpu_cel(f'{o}.inference.template')}))) || has({o}.tuning))"),
    }
    parts = []
    for kinds, expr in by_kind.items():
        test = " || ".join(f"{o}.kind == {cel_string(k)}" for k in kinds.split())
        parts.append(f"(({test}) && {expr})")
    # The kinds of issue 28 (CronJob, Volcano, Kubeflow, KServe, KAITO InferenceSet, AppWrapper) are sent whole: their
    # templates sit at many paths (a model-format field, an AppWrapper's podSets path) and a condition that missed one
    # would hide a GPU workload from Allot. A Volcano Job is a `Job` with `spec.tasks`.
    covered = {k for kinds in by_kind for k in kinds.split()}
    sent = sorted({k.split(".", 1)[0] for k in WORKLOAD_RESOURCES} - covered)
    parts.append("(" + " || ".join(f"{o}.kind == {cel_string(k)}" for k in sent) + ")")
    parts.append(f"({o}.kind == \"Job\" && has({o}.spec) && has({o}.spec.tasks))")
    return f"(has({o}.kind) && ({' || '.join(parts)}))"


def gpu_workload_cel() -> str:
    """CEL true for a workload object whose templates ask for a GPU, or any `scale` request.

    The new object only: an UPDATE whose templates ask no GPU any more adds no GPUs to judge.
    """
    return (
        "(has(request.subResource) && request.subResource == \"scale\") || "
        f"(request.operation != \"DELETE\" && {_templates_gpu_cel('object')})"
    )


def gpu_workload_deleted_cel() -> str:
    """CEL true for the DELETE of a workload object whose templates asked for a GPU (its hold is released)."""
    return f"request.operation == \"DELETE\" && {_templates_gpu_cel('oldObject')}"


# ---- namespaces -----------------------------------------------------------------


def namespace_cel(scope: NamespaceScope) -> str:
    """CEL true when `request.namespace` is in the scope (exact names or globs)."""
    parts = [f"request.namespace == {cel_string(n)}" for n in sorted(scope.names)]
    parts += [glob_cel("request.namespace", g) for g in sorted(scope.globs)]
    return " || ".join(parts) if parts else "false"
