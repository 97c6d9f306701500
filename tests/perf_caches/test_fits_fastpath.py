"""`PlacementIndex.fits` (yes/no without building a placement) answers exactly as `query(...).fits`.

The fast path sums node capacities only until the gang fits; a differential test against
the full search on random small clusters, before and after usage changes, holds it to that.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.placement.placement_builders import H100, L4, MODELS, gang, index, node, pod  # noqa: E402
from tests.policy.placement.test_properties import DEMANDS, clusters  # noqa: E402

from policy.placement import GangRequest, PlacementIndex  # noqa: E402
from policy.placement.index import FLAT  # noqa: E402
from policy.subject.model import PodSet  # noqa: E402

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(clusters(), DEMANDS, st.integers(1, 12), st.data())
def test_fits_equals_the_full_search(cluster, demand, count, data):
    topologies, nodes, pods = cluster
    levels = [name for name, _label in topologies[0][1]]
    idx = PlacementIndex(topologies, MODELS)
    for n in nodes:
        idx.apply_node("ADDED", n)
    for p in pods:
        idx.apply_pod("ADDED", p)
    gpus, fraction = demand
    topology = data.draw(st.sampled_from(["t", FLAT]))
    named = levels if topology == "t" else []
    required = data.draw(st.sampled_from([None, *named]))
    preferred = data.draw(st.sampled_from([None, *named]))
    per_gpu = data.draw(st.sampled_from([None, 1, 2, 3])) if fraction else None
    product = data.draw(st.sampled_from([None, H100, L4]))
    tolerations = ({"key": "maint", "operator": "Exists"},) if data.draw(st.booleans()) else ()
    min_count = data.draw(st.sampled_from([None, 1, count]))
    g = GangRequest((PodSet("w", count, gpus, fraction=fraction, gpu_product=product),), min_count=min_count,
                    topology=topology, required=required, preferred=preferred, per_gpu=per_gpu, tolerations=tolerations)
    assert idx.fits(g) == idx.query(g).fits
    for p in pods[: data.draw(st.integers(0, len(pods)))]:  # usage leaves: the answer follows the index
        idx.apply_pod("DELETED", p)
    assert idx.fits(g) == idx.query(g).fits


def test_fits_table():
    """Named cases: unknown topology and level, nothing asked, a two-set gang (full search), per_gpu limits."""
    nodes = [node("a", "b1", "r1", gpus=1), node("b", "b1", "r2", gpus=2)]
    two_sets = GangRequest((PodSet("x", 1, 1000), PodSet("y", 1, 2000)), topology="fabric")
    cases = [
        {"name": "fits", "gang": gang(2), "pods": [], "want_fits": True},
        {"name": "too big", "gang": gang(4), "pods": [], "want_fits": False},
        {"name": "unknown topology", "gang": gang(1, topology="nope"), "pods": [], "want_fits": False},
        {"name": "unknown level", "gang": gang(1, required="zone"), "pods": [], "want_fits": False},
        {"name": "asks no GPU", "gang": gang(1, gpus=0), "pods": [], "want_fits": False},
        {"name": "two pod sets", "gang": two_sets, "pods": [], "want_fits": True},
        {"name": "per_gpu full", "gang": gang(1, 250, fraction=250, per_gpu=1, topology=FLAT),
         "pods": [pod("w", "b", gpus=2), pod("s", "a", share="0.25")], "want_fits": False},
        {"name": "per_gpu room", "gang": gang(1, 250, fraction=250, per_gpu=2, topology=FLAT),
         "pods": [pod("w", "b", gpus=2), pod("s", "a", share="0.25")], "want_fits": True},
        {"name": "rack required, each rack too small", "gang": gang(3, required="rack"), "pods": [], "want_fits": False},
    ]
    for case in cases:
        idx = index(nodes, case["pods"])
        got = idx.fits(case["gang"])
        assert got == case["want_fits"], case["name"]
        assert got == idx.query(case["gang"]).fits, case["name"]
