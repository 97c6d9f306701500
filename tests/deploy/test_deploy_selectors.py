"""Pod webhooks narrowed by each block's for/when as CEL: exact where CEL can see, sound everywhere."""

import fnmatch
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deploy_apiserver as api
import deploy_builders as b
from lang import ir
from policy.manifests import configurations as m
from policy.manifests import match as manifests_match

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "80"))


def hits(ps: ir.PolicySet, req: dict) -> set[str]:
    return set(api.intercepting(m.validating_configuration(ps), req)) | set(api.intercepting(m.mutating_configuration(ps), req))


# ---- for/when translated to CEL over the request and the object ------------------------------------


def pod_with(labels=None, priority_class=None, gpu=False) -> dict:
    p = b.pod(gpu=gpu)
    p["metadata"]["labels"] = labels or {}
    if priority_class:
        p["spec"]["priorityClassName"] = priority_class
    return p


CRITICAL_OUTSIDE_PROD = b.deny_rule(
    "critical-is-for-serving", b.eq("priority_class", "critical"), b.not_(b.matches("namespace", "prod-*")))
OWNERLESS_PROD = b.deny_rule(
    "prod-needs-an-owner", b.eq("priority_class", "prod"), b.not_(ir.Contains(b.lit("acme.io/owner"), b.field("labels"), b.S)))
SELECTORS = ir.PolicySet(quotas=(b.quota("all"),), rules=(CRITICAL_OUTSIDE_PROD, OWNERLESS_PROD))
VALIDATE = {"pods.validate.allot.io"}


@pytest.mark.parametrize(
    "name, req, want_hits",
    [
        ("gpu pod (the quota)", b.request(obj=pod_with(gpu=True)), VALIDATE),
        ("plain cpu pod", b.request(obj=pod_with()), set()),
        ("cpu pod, critical, team ns", b.request(obj=pod_with(priority_class="critical")), VALIDATE),
        ("cpu pod, critical, prod ns", b.request(namespace="prod-web", obj=pod_with(priority_class="critical")), set()),
        ("cpu pod, prod class, no owner", b.request(obj=pod_with(priority_class="prod")), VALIDATE),
        ("cpu pod, prod class, owner", b.request(obj=pod_with({"acme.io/owner": "x"}, "prod")), set()),
        # UPDATE dropping the owner label: the old object has it, the new one does not -> must be seen
        ("update removing the owner", b.request(operation="UPDATE", obj=pod_with(priority_class="prod"),
                                                old=pod_with({"acme.io/owner": "x"}, "prod")), VALIDATE),
        ("update adding the owner", b.request(operation="UPDATE", obj=pod_with({"acme.io/owner": "x"}, "prod"),
                                              old=pod_with(priority_class="prod")), VALIDATE),
    ],
)
def test_policy_selectors_send_only_what_a_for_when_can_match(name, req, want_hits):
    assert hits(SELECTORS, req) == want_hits, name


@pytest.mark.parametrize(
    "selector, labels, want",
    [
        (ir.Compare("==", b.label("tier"), b.lit("gold"), b.S), {"tier": "gold"}, True),
        (ir.Compare("==", b.label("tier"), b.lit("gold"), b.S), {"tier": "tin"}, False),
        (ir.Compare("!=", b.label("tier"), b.lit("gold"), b.S), {}, False),  # none compares false
        (ir.Compare("!=", b.label("tier"), b.lit("gold"), b.S), {"tier": "tin"}, True),
        (ir.Matches(b.label("tier"), "go*", b.S), {"tier": "gold"}, True),
        (ir.Has(b.label("tier"), b.S), {"tier": ""}, True),
        (b.not_(ir.Has(b.label("tier"), b.S)), {"tier": ""}, False),
        # an atom CEL cannot see (namespace labels come from cluster state) never narrows
        (ir.Compare("==", ir.Index(b.field("namespace.labels"), "team", b.S), b.lit("a"), b.S), {}, True),
        (b.not_(ir.Compare("==", ir.Index(b.field("namespace.labels"), "team", b.S), b.lit("a"), b.S)), {}, True),
    ],
)
def test_label_selectors_translate_exactly_or_not_at_all(selector, labels, want):
    ps = ir.PolicySet(rules=(b.deny_rule("r", selector),))
    assert bool(hits(ps, b.request(obj=pod_with(labels)))) is want


# ---- soundness: whenever a for/when can hold, the API server sends the request ----------------------

LABEL_KEYS, VALUES, NAMESPACES = ("tier", "team"), ("a", "b"), ("a", "prod-x")


def atoms():
    label_eq = st.builds(lambda k, v, op: ir.Compare(op, b.label(k), b.lit(v), b.S),
                         st.sampled_from(LABEL_KEYS), st.sampled_from(VALUES), st.sampled_from(["==", "!="]))
    label_has = st.builds(lambda k: ir.Has(b.label(k), b.S), st.sampled_from(LABEL_KEYS))
    ns = st.builds(lambda v: b.eq("namespace", v), st.sampled_from(NAMESPACES))
    ns_glob = st.just(b.matches("namespace", "prod-*"))
    prio = st.builds(lambda v: b.eq("priority_class", v), st.sampled_from(VALUES))
    opaque = st.just(ir.Compare("==", ir.Index(b.field("namespace.labels"), "team", b.S), b.lit("a"), b.S))
    return st.one_of(label_eq, label_has, ns, ns_glob, prio, opaque)


EXPRS = st.recursive(atoms(), lambda inner: st.one_of(
    st.builds(lambda xs: b.all_of(*xs), st.lists(inner, min_size=2, max_size=3)),
    st.builds(lambda xs: b.any_of(*xs), st.lists(inner, min_size=2, max_size=3)),
    st.builds(b.not_, inner)), max_leaves=6)


def truth(e, subject: dict, namespace: str, opaque: bool):
    """Reference semantics of the generated expressions on one object (none compares false)."""
    labels = subject["metadata"].get("labels", {})
    if isinstance(e, ir.And):
        return all(truth(i, subject, namespace, opaque) for i in e.items)
    if isinstance(e, ir.Or):
        return any(truth(i, subject, namespace, opaque) for i in e.items)
    if isinstance(e, ir.Not):
        return not truth(e.item, subject, namespace, opaque)
    if isinstance(e, ir.Has):
        return e.target.key in labels
    if isinstance(e, ir.Matches):
        return fnmatch.fnmatchcase(namespace, e.pattern)
    if isinstance(e.left, ir.Index) and e.left.target.name == "namespace.labels":
        return opaque
    if isinstance(e.left, ir.Index):
        value = labels.get(e.left.key)
    elif e.left.name == "namespace":
        value = namespace
    else:
        value = subject["spec"].get("priorityClassName")
    return value is not None and (value == e.right.value) == (e.op == "==")


OBJECTS = st.builds(lambda labels, prio: pod_with(labels, prio),
                    st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(VALUES), max_size=2),
                    st.one_of(st.none(), st.sampled_from(VALUES)))


@settings(max_examples=EXAMPLES, deadline=None)
@given(expr=EXPRS, new=OBJECTS, old=OBJECTS, op=st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
       namespace=st.sampled_from(NAMESPACES), opaque=st.booleans())
def test_over_approximation_never_hides_a_request_the_expression_matches(expr, new, old, op, namespace, opaque):
    obj, old_obj = (None if op == "DELETE" else new), (None if op == "CREATE" else old)
    subjects = [o for o in (obj, old_obj) if o is not None]  # the engine reads one of them
    expression = manifests_match.over(expr)
    if any(truth(expr, s, namespace, opaque) for s in subjects):
        req = b.request(operation=op, namespace=namespace, obj=obj, old=old_obj)
        assert api.evaluate(expression, req), expression
