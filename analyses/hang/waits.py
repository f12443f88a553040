"""Who waits for whom across process groups, and the ranks a hang started from.

Each report record says which ranks are blocked and which ranks they wait for; :func:`wait_edges` turns
the records into a graph r -> m ("r waits for m"), and :func:`terminal_components` finds where waiting
ends: a rank that is waited for and waits for nobody (the hang started there), or ranks that wait for
each other (a deadlock). :func:`find_suspects` does both and sorts the answer for the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Suspects", "find_suspects", "wait_edges", "terminal_components"]


def wait_edges(records: Iterable[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """Edges r -> m: rank r is blocked in something rank m never entered.

    Collectives: every member still running the collective waits for each missing rank. Send/recv: the
    waiting side waits for its peer. A rank whose wait no proven-missing rank explains (everyone with a
    record entered, none completed) is taken to wait for the members whose dumps say nothing (no dump,
    unreadable dump, no record of the group).
    Example: ranks 0-2 run #10 of a group whose rank 3 left no dump -> 0->3, 1->3, 2->3; had rank 0 also
    waited for a proven-missing rank 5 elsewhere, only 0->5 would be kept for rank 0.
    """
    proven: set[tuple[int, int]] = set()
    unexplained: set[tuple[int, int]] = set()
    for rec in records:
        if rec["kind"] == "p2p":
            proven.update((a, b) for a, b in rec["waits"] if b in rec["missing_ranks"])
            unexplained.update((a, b) for a, b in rec["waits"] if b in rec["unknown_ranks"])
        elif rec["missing_ranks"]:
            proven.update((r, m) for r in rec["not_completed_ranks"] for m in rec["missing_ranks"] if r != m)
        elif not rec["completed_ranks"]:
            unexplained.update(
                (r, u) for r in rec["not_completed_ranks"] for u in rec["unknown_ranks"] if r != u
            )
    explained = {a for a, _ in proven}
    return proven | {(a, b) for a, b in unexplained if a not in explained}


def terminal_components(edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Strongly connected components that wait for nobody outside themselves and are waited for.

    A single rank there is where the hang started (it waits for no one); several ranks there wait for
    each other (a deadlock, e.g. collectives issued in different orders).
    Example: edges {0->2, 1->2, 2->3} -> [[3]]; edges {0->1, 1->0, 2->0} -> [[0, 1]].
    """
    graph: dict[int, set[int]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    comp_of = _tarjan(graph)
    comps: dict[int, list[int]] = {}
    for node, c in comp_of.items():
        comps.setdefault(c, []).append(node)
    out_edges = {c: False for c in comps}
    in_edges = {c: False for c in comps}
    for a, succ in graph.items():
        for b in succ:
            if comp_of[a] != comp_of[b]:
                out_edges[comp_of[a]] = True
                in_edges[comp_of[b]] = True
            elif a != b:
                in_edges[comp_of[b]] = True
    return sorted(sorted(ns) for c, ns in comps.items() if not out_edges[c] and in_edges[c])


def _tarjan(graph: Mapping[int, set[int]]) -> dict[int, int]:
    """Iterative Tarjan: node -> component id."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    work: list[tuple[int, Iterator[int]]] = []  # the DFS path, each node with its successors left

    def visit(node: int) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph[node]))))

    for root in sorted(graph):
        if root in index:
            continue
        visit(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    visit(nxt)
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp[w] = node
                    if w == node:
                        break
    return comp


@dataclass(frozen=True)
class Suspects:
    """The terminal components of the wait graph, sorted for the report."""

    started: list[int]  # single ranks, waited for and waiting for nobody, with a usable dump
    unaccounted: list[int]  # single ranks others wait for that left no usable dump
    cycles: list[list[int]]  # groups of ranks waiting for each other

    @property
    def ranks(self) -> set[int]:
        return {*self.started, *self.unaccounted, *(r for c in self.cycles for r in c)}


def find_suspects(records: Iterable[Mapping[str, Any]], absent: Mapping[int, str]) -> Suspects:
    """The ranks the hang started from, given the report records and the ranks without a usable dump."""
    components = terminal_components(wait_edges(records))
    singles = [c[0] for c in components if len(c) == 1]
    return Suspects(
        started=sorted(r for r in singles if r not in absent),
        unaccounted=sorted(r for r in singles if r in absent),
        cycles=[c for c in components if len(c) > 1],
    )
