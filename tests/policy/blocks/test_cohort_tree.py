"""Kueue hierarchical cohorts in integers: what a quota may borrow through nested cohorts, and weighted fair shares."""

from __future__ import annotations

import pytest

from lang import compile_policies
from policy.blocks.cohorts import INFINITE_SHARE, CohortTree
from policy.blocks.quota import compile_quota

NESTED = '''
cohort org {
  gpus 8
}
cohort research {
  parent org
  borrow 12
}
cohort prod {
  parent org
  lend 4
}
quota a {
  cohort research
  gpus 16
}
quota b {
  cohort research
  gpus 8
  lend 2
}
quota c {
  cohort prod
  gpus 16
  weight 2
}
'''


def tree(text: str) -> CohortTree:
    ps, diags = compile_policies([("t.policy", text)])
    assert not [d for d in diags if d.severity == "error"], diags
    specs = [compile_quota(q, i, None, q.mode) for i, q in enumerate(ps.quotas)]
    return CohortTree(specs, ps.cohorts)


@pytest.mark.parametrize("used,quota,borrowable", [
    # a borrows b's 2 (lend 2) + org's own 8 + prod's 4 = 14, capped by research's borrow 12 from org: 2 + 12
    ((0, 0, 0), 0, 14),
    ((0, 8, 0), 0, 12),  # b uses all it has: its 2 lent are gone; research still takes 12 from org
    ((0, 0, 16), 0, 2 + 8),  # c uses prod's subtree: prod lends nothing left; org's own 8 remain
    ((16, 0, 0), 2, 10),  # c borrows through prod from org: org's own 8 + b's 2 lent (a uses only its own 16)
    ((30, 0, 0), 1, 0),  # a took 14 beyond its 16: nothing left for b beyond its nominal
])
def test_borrowable_through_nested_cohorts(used, quota, borrowable):
    t = tree(NESTED)
    milli = [u * 1000 for u in used]
    assert t.borrowable(quota, milli) == borrowable * 1000


def test_subtree_quota_and_guaranteed():
    t = tree(NESTED)
    research, prod, org = t.index["research"], t.index["prod"], t.index["org"]
    assert t.subtree[research] == 18000 and t.guaranteed[1] == 6000  # b keeps 6 of its 8, lends research 2
    assert t.subtree[prod] == 16000 and t.guaranteed[prod] == 12000  # prod lends 4 of its 16
    assert t.subtree[org] == 8000 + (18000 - 0) + (16000 - 12000)


def test_weighted_dominant_resource_share():
    """share = borrowed x 1000 / lendable (the parent's subtree quota) x 1000 / weight (milli)."""
    t = tree(NESTED)
    usage = t.usage([20000, 0, 20000])
    assert t.share(0, usage) == (4000 * 1000 // 18000) * 1000 // 1000  # a borrows 4 of research's 18
    assert t.share(2, usage) == (4000 * 1000 // 16000) * 1000 // 2000  # c borrows 4 of prod's 16, weight 2
    assert t.share(1, usage) == 0  # within its nominal
    assert t.share(0, usage, extra=-4000) == 0


def test_weight_zero_is_the_largest_share_while_borrowing():
    t = tree('quota a {\n cohort x\n gpus 4\n weight 0\n}\nquota b {\n cohort x\n gpus 4\n}\n')
    assert t.share(0, t.usage([5000, 0])) == INFINITE_SHARE and t.share(0, t.usage([4000, 0])) == 0


def test_flat_cohort_is_the_old_pool_formula():
    """For a flat cohort the tree's borrowable equals docs/semantics.md's pool formula, whatever the usage."""
    t = tree('quota a {\n cohort x\n gpus 8\n borrow 6\n}\nquota b {\n cohort x\n gpus 8\n lend 4\n}\nquota c {\n cohort x\n gpus 4\n}\n')
    nominal, lend, borrow = [8000, 8000, 4000], [None, 4000, None], 6000
    for ub in range(0, 13, 2):
        for uc in range(0, 9, 2):
            used = [3000, ub * 1000, uc * 1000]
            pool = sum(min(max(0, nominal[j] - used[j]), lend[j] if lend[j] is not None else 10**9) for j in (1, 2))
            pool -= sum(max(0, used[j] - nominal[j]) for j in (1, 2))
            assert t.borrowable(0, used) == min(borrow, max(0, pool)), used
