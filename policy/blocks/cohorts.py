"""Cohort trees with Kueue's hierarchical semantics, in milli-GPU integers: what a quota may borrow, and fair shares.

Nodes are the quotas (node i is quota index i) and the cohorts (declared `cohort` blocks, and
cohorts only quotas name). Per node, statically:

    subtree(n)    = nominal(n) + sum over children c of (subtree(c) - guaranteed(c))
    guaranteed(n) = max(0, subtree(n) - lend(n)) with a `lend`, else 0   (kept from the parent)

and from usage (a quota's is what the ledger charges it; a cohort's is what its children use
beyond their guaranteed part):

    usage(cohort) = sum over children c of max(0, usage(c) - guaranteed(c))
    available(n)  = subtree(n) - usage(n)                                   at a root
                  = max(0, guaranteed(n) - usage(n)) + min(available(parent),
                        subtree(n) - guaranteed(n) - max(0, usage(n) - guaranteed(n)) + borrow(n))   below one
                    (the min only with a `borrow`)

A request fits a quota when it is at most `available`; `borrowable = available + used - nominal`
is the same test written as the quota message's `used + requested <= nominal + borrowable`. For a
flat cohort this is exactly the pool formula of docs/semantics.md.

Fair share (Kueue's weighted dominant resource share, one resource here):

    share(n) = (usage(n) - subtree(n)) * 1000 // subtree(parent) * 1000 // weight(n)   when borrowing, else 0
    (weight in milli, 1000 by default; weight 0 while borrowing: the largest share there is)
"""

from __future__ import annotations

from lang import ir

NO_PARENT = -1
INFINITE_SHARE = 2**62  # Kueue: a weight of 0 makes the share infinite while the node borrows


class CohortTree:
    """The cohort forest over one policy set's quotas; usage comes from the caller (the ledger's `used`)."""

    def __init__(self, specs, cohorts: tuple[ir.Cohort, ...] = ()):
        declared = {c.name: c for c in cohorts}
        names = sorted({s.cohort for s in specs if s.cohort} | set(declared) | {c.parent for c in cohorts if c.parent})
        count = len(specs)
        self.quotas = count
        self.ids = [s.id for s in specs] + [f"cohort {n}" for n in names]
        self.index = {n: count + i for i, n in enumerate(names)}
        size = count + len(names)
        self.parent = [NO_PARENT] * size
        self.nominal = [s.nominal or 0 for s in specs] + [(declared[n].gpus or 0) if n in declared else 0 for n in names]
        self.borrow = [s.borrow for s in specs] + [declared[n].borrow if n in declared else None for n in names]
        self.lend = [s.lend for s in specs] + [declared[n].lend if n in declared else None for n in names]
        self.weight = [1000 if getattr(s, "weight", None) is None else s.weight for s in specs] + [
            1000 if n not in declared or declared[n].weight is None else declared[n].weight for n in names]
        for s in specs:
            if s.cohort:
                self.parent[s.index] = self.index[s.cohort]
        for c in cohorts:
            if c.parent and self._acyclic(self.index[c.name], self.index[c.parent]):
                self.parent[self.index[c.name]] = self.index[c.parent]
        self.children: list[list[int]] = [[] for _ in range(size)]
        for n, p in enumerate(self.parent):
            if p != NO_PARENT:
                self.children[p].append(n)
        self.order = self._postorder()  # children before parents
        self.subtree = [0] * size
        self.guaranteed = [0] * size
        for n in self.order:
            self.subtree[n] = self.nominal[n] + sum(self.subtree[c] - self.guaranteed[c] for c in self.children[n])
            lend = self.lend[n]
            self.guaranteed[n] = max(0, self.subtree[n] - lend) if lend is not None else 0
        self.members: dict[int, tuple[int, ...]] = {}  # quota -> the other quotas of its tree (filled on first need)
        self.fair: set[int] = set()  # roots of trees where some node declares a `weight`: fair sharing is on there
        for n in range(size):
            if (n < count and getattr(specs[n], "weight", None) is not None) or (n >= count and names[n - count] in declared
                                                                                  and declared[names[n - count]].weight is not None):
                self.fair.add(self.root(n))

    def _acyclic(self, child: int, parent: int) -> bool:
        n = parent
        while n != NO_PARENT:
            if n == child:
                return False  # `allot check` refuses it (E0321); a tree built anyway ignores the edge
            n = self.parent[n]
        return True

    def _postorder(self) -> list[int]:
        """Nodes deepest first, so each node's children come before it."""
        depth = []
        for n in range(len(self.parent)):
            d, m = 0, self.parent[n]
            while m != NO_PARENT:
                d, m = d + 1, self.parent[m]
            depth.append(d)
        return sorted(range(len(self.parent)), key=lambda n: -depth[n])

    def root(self, n: int) -> int:
        """The root of node `n`'s tree."""
        while self.parent[n] != NO_PARENT:
            n = self.parent[n]
        return n

    def usage(self, used) -> list[int]:
        """Every node's usage from the quotas' `used` (milli-GPU, by quota index)."""
        u = list(used) + [0] * (len(self.parent) - self.quotas)
        for n in self.order:
            if n >= self.quotas:
                u[n] = sum(max(0, u[c] - self.guaranteed[c]) for c in self.children[n])
        return u

    def available(self, n: int, usage: list[int]) -> int:
        """What node `n` may still take (Kueue `available`; negative when over-admitted)."""
        p = self.parent[n]
        if p == NO_PARENT:
            return self.subtree[n] - usage[n]
        g = self.guaranteed[n]
        from_parent = self.available(p, usage)
        borrow = self.borrow[n]
        if borrow is not None:
            from_parent = min(from_parent, self.subtree[n] - g - max(0, usage[n] - g) + borrow)
        return max(0, g - usage[n]) + from_parent

    def borrowable(self, qi: int, used) -> int:
        """Milli-GPU quota `qi` may take beyond its nominal now: `used + requested <= nominal + borrowable` iff it fits."""
        if self.parent[qi] == NO_PARENT or self.borrow[qi] == 0:
            return 0
        usage = self.usage(used)
        return max(0, self.available(qi, usage) + usage[qi] - self.nominal[qi])

    def share(self, n: int, usage: list[int], extra: int = 0) -> int:
        """Node `n`'s weighted share with `extra` milli-GPU more (negative: less) used; 0 while within its subtree quota."""
        p = self.parent[n]
        if p == NO_PARENT:
            return 0
        borrowed = usage[n] + extra - self.subtree[n]
        if borrowed <= 0:
            return 0
        if self.weight[n] == 0:
            return INFINITE_SHARE
        lendable = self.subtree[p]
        ratio = borrowed * 1000 // lendable if lendable > 0 else INFINITE_SHARE
        return ratio * 1000 // self.weight[n]

    def others_borrow(self, qi: int, used) -> bool:
        """Whether another quota of `qi`'s cohort tree uses more than its nominal now (a reclaim could find a victim)."""
        members = self.members.get(qi)
        if members is None:
            root = self.root(qi) if self.parent[qi] != NO_PARENT else None
            members = self.members[qi] = tuple(j for j in range(self.quotas) if j != qi and root is not None
                                               and self.parent[j] != NO_PARENT and self.root(j) == root)
        nominal = self.nominal
        return any(used[j] > nominal[j] for j in members)

    def same_tree(self, a: int, b: int) -> bool:
        """Whether two nodes share a root (quotas of one cohort tree)."""
        return self.parent[a] != NO_PARENT and self.parent[b] != NO_PARENT and self.root(a) == self.root(b)
