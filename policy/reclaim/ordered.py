"""Who may give way, and the ordered search: candidates read in victim order from the book's per-quota lists, lazily.

`Givers` holds one request's rules (which quotas borrow and may be taken from, the priority a
preemption must beat, the victims already pledged) and answers per unit whether it is a candidate
and as which (`Candidate`, memoized). The plain search (`search.choose`) builds every candidate
and orders them all per request; `choose_ordered` chooses the same plan reading each quota's
units already in victim order (`VictimBook.ordered`, kept between requests), merged across quotas,
and stops at the first domains that can land the request (tests/policy/reclaim/test_ordered.py
checks both choose alike over generated clusters).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from operator import itemgetter

from policy.reclaim.search import RETRIES, Candidate, _greedy, order_key


class Givers:
    """One request's candidate rules over the book: other quotas' borrowers (`takes`: qi -> (share, why)), then own lower priorities."""

    def __init__(self, book, *, mine: set[int], takes: dict[int, tuple[int, str]], preempt: bool, priority: int,
                 seen: set, own_reason: Callable[[object, int], str]):
        self.book, self.mine, self.takes, self.preempt, self.priority = book, mine, takes, preempt, priority
        self.seen, self.own_reason = seen, own_reason
        self._rank = {qi: i for i, qi in enumerate(takes)}  # the first quota a unit is found under names its candidate
        self._order = list(takes)
        self._memo: dict[tuple, tuple] = {}

    def of(self, u) -> Candidate | None:
        """The candidate `u` is for this request, or None (pledged, not lower priority, within a nominal it shares with mine)."""
        return self._of(u)[0]

    def _of(self, u) -> tuple[Candidate | None, int | None]:
        """(its candidate, the quota whose list names it) — a unit charged to two quotas is read from one list."""
        key = u.key
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        hit = (None, None)
        if key not in self.seen:
            charged = u.milli
            low = u.facts()[0]
            if self.mine.isdisjoint(charged):
                ranked = [self._rank[qi] for qi in charged if qi in self._rank]
                if ranked and not (self.preempt and low >= self.priority):
                    qi = self._order[min(ranked)]
                    share, why = self.takes[qi]
                    hit = (Candidate(u, True, share, why), qi)
            elif self.preempt and low < self.priority:
                r = next(r for r in self.mine if r in charged)
                hit = (Candidate(u, False, 0, self.own_reason(u, r)), r)
        self._memo[key] = hit
        return hit

    def quotas(self) -> list[tuple[int, bool]]:
        """(quota index, taken as another quota's borrower) of every list a candidate is read from."""
        return [(qi, True) for qi in self.takes] + ([(r, False) for r in self.mine] if self.preempt else [])

    def all(self) -> list[Candidate]:
        """Every candidate (the plain search's input), each once."""
        out, done = [], set()
        for qi, _other in self.quotas():
            for u in self.book.by_quota.get(qi, {}).values():
                if u.key not in done:
                    done.add(u.key)
                    c = self.of(u)
                    if c is not None:
                        out.append(c)
        return out

    def stream(self, need: int) -> Iterator[tuple[tuple, Candidate]]:
        """(order key, candidate) in victim order: each quota's ordered units, ties on (priority, admitted) sorted by waste, merged."""
        return heapq.merge(*(self._one(qi, other, need) for qi, other in self.quotas()), key=itemgetter(0))

    def _one(self, qi: int, other: bool, need: int) -> Iterator[tuple[tuple, Candidate]]:
        group: list = []
        at = None
        for u in self.book.ordered(qi):
            low, newest, _gpus = u.facts()
            if self.preempt and low >= self.priority:
                break  # the rest are no lower priority: none may give way to a preemption
            c, source = self._of(u)
            if c is None or source != qi or c.other is not other:
                continue  # not a candidate, or one read from another quota's list
            if (low, newest) != at:
                group.sort(key=itemgetter(0))
                yield from group
                group, at = [], (low, newest)
            group.append((order_key(c, need), c))
        group.sort(key=itemgetter(0))
        yield from group


class _Seen:
    """The stream read so far, indexable; reads on only as far as asked."""

    def __init__(self, stream: Iterator[tuple[tuple, Candidate]]):
        self._stream, self.items = stream, []

    def has(self, i: int) -> bool:
        """Whether the `i`th candidate exists (reading up to it)."""
        while len(self.items) <= i:
            item = next(self._stream, None)
            if item is None:
                return False
            self.items.append(item[1])
        return True

    def __iter__(self) -> Iterator[Candidate]:
        i = 0
        while self.has(i):
            yield self.items[i]
            i += 1


def _first(seen: _Seen, start: int) -> Iterator[Candidate]:
    """The order with the `start`th candidate taken first."""
    yield seen.items[start]
    for i, c in enumerate(seen):
        if i != start:
            yield c


def choose_ordered(givers: Givers, *, used, nominal, quota_fits, lands, need: int, domain: Callable[[str], list] | None = None,
                   domains: Callable[[Candidate], frozenset] | None = None) -> tuple[list[Candidate] | None, bool]:
    """The plan `search.choose` makes over `givers.all()`, read lazily; (victims or None, whether any candidate exists).

    `domain(d)` lists the units a domain's GPUs are held by (those of its nodes), `domains(c)` the
    domains a candidate frees GPUs in; with both, domains are tried in the order of their most
    preferred candidate, as the plain search does.
    """
    seen = _Seen(givers.stream(need))
    if not seen.has(0):
        return None, False
    if lands is not None and domains is not None and domain is not None:
        for d in _domain_order(seen, domains):
            items = {}
            for u in domain(d):
                c = givers.of(u)
                if c is not None and u.key not in items and d in domains(c):
                    items[u.key] = (order_key(c, need), c)
            ordered = [c for _k, c in sorted(items.values(), key=itemgetter(0))]
            chosen = _greedy(ordered, used, nominal, quota_fits, lands)
            if chosen is not None:
                return chosen, True
        return None, True
    for start in range(RETRIES if lands is not None else 1):
        if not seen.has(start):
            break
        chosen = _greedy(_first(seen, start) if start else iter(seen), used, nominal, quota_fits, lands)
        if chosen is not None:
            return chosen, True
    return None, True


def _domain_order(seen: _Seen, domains) -> Iterator:
    """The first `RETRIES` domains by their most preferred candidate (ties: the domain's name), as they are first met."""
    met: set = set()
    for c in seen:
        for d in sorted(domains(c) - met):
            met.add(d)
            yield d
            if len(met) >= RETRIES:
                return
