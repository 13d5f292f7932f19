"""Communities of a collection's entity network: Louvain levels, members, summaries.

Louvain (`networkx.community.louvain_communities`/`louvain_partitions`) rather
than Leiden: networkx is already a dependency and pure Python, while the usual
Leiden implementations (`leidenalg`, `graspologic`) pull in compiled igraph or
numba stacks for a modest quality gain on graphs of this size. The seed is fixed
so the same network always gives the same communities (stable ids in tests and
in stored summaries).

Each Louvain level is stored (level 0 the finest); communities of one entity
are not stored. The summary is extractive (the most connected members and the
description of the most connected one) unless a summariser is given; a failing
summariser falls back to the extractive summary, with a log line.

Only collections marked dirty are recomputed, and the flag is cleared only if no
write bumped the collection's version while the job ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import psycopg

logger = logging.getLogger(__name__)

LOUVAIN_SEED = 42
SUMMARY_MEMBERS = 8

Summarizer = Callable[[list[tuple[str, str]]], str]
"""Called with `(name, description)` of a community's members, most connected first."""


@dataclass(frozen=True)
class Community:
    """One community of one level."""

    level: int
    members: tuple[int, ...]
    """Entity ids, most connected first."""
    summary: str


def detect(network: nx.Graph, *, seed: int = LOUVAIN_SEED) -> list[list[set[int]]]:
    """Return the Louvain partition of every level, finest first (empty network: no level)."""
    if network.number_of_edges() == 0:
        return []
    return [list(p) for p in nx.community.louvain_partitions(network, weight="weight", seed=seed)]


def build_network(
    entities: Sequence[tuple[int, str, str]], edges: Sequence[tuple[int, int, float]]
) -> nx.Graph:
    """Build the undirected weighted entity network: `(id, name, description)`, `(a, b, weight)`."""
    network = nx.Graph()
    for ent_id, name, description in entities:
        network.add_node(ent_id, name=name, description=description)
    for a, b, weight in edges:
        if a == b or a not in network or b not in network:
            continue
        held = network.get_edge_data(a, b, default={"weight": 0.0})["weight"]
        network.add_edge(a, b, weight=held + float(weight))
    return network


def extractive_summary(network: nx.Graph, members: Sequence[int]) -> str:
    """Name the most connected members and quote the top one's description."""
    names = [network.nodes[m]["name"] for m in members[:SUMMARY_MEMBERS]]
    more = f" and {len(members) - len(names)} more" if len(members) > len(names) else ""
    text = f"{len(members)} entities: {', '.join(names)}{more}."
    top = network.nodes[members[0]].get("description") or ""
    return f"{text} {top}".strip()


def communities(
    network: nx.Graph, *, summarizer: Summarizer | None = None, seed: int = LOUVAIN_SEED
) -> list[Community]:
    """Detect and summarise the communities of every level."""
    strength = dict(network.degree(weight="weight"))
    out = []
    for level, partition in enumerate(detect(network, seed=seed)):
        for group in partition:
            if len(group) < 2:
                continue
            members = sorted(group, key=lambda n: (-strength[n], n))
            out.append(Community(level, tuple(members), _summary(network, members, summarizer)))
    return out


def _summary(network: nx.Graph, members: list[int], summarizer: Summarizer | None) -> str:
    if summarizer is not None:
        pairs = [(network.nodes[m]["name"], network.nodes[m]["description"]) for m in members]
        try:
            text: object = summarizer(pairs[: SUMMARY_MEMBERS * 4])  # a model may return anything
            if isinstance(text, str) and text.strip():
                return text.strip()
            logger.warning("community summariser returned no text; using the extractive summary")
        except Exception as exc:  # a model failure must not lose the communities
            logger.warning("community summariser failed (%s); using the extractive summary", exc)
    return extractive_summary(network, members)


def load_network(conn: psycopg.Connection[Any], collection_id: int) -> nx.Graph:
    """Read a collection's entities and summed relationship strengths into a network."""
    entities = conn.execute(
        "SELECT id, name, description FROM kb_graph_entities WHERE collection_id = %s",
        (collection_id,),
    ).fetchall()
    edges = conn.execute(
        "SELECT source_id, target_id, sum(strength) FROM kb_graph_relationships"
        " WHERE collection_id = %s GROUP BY 1, 2",
        (collection_id,),
    ).fetchall()
    return build_network(entities, edges)


def update_dirty(
    conn: psycopg.Connection[Any],
    collection_ids: Sequence[int] | None = None,
    *,
    summarizer: Summarizer | None = None,
) -> dict[int, int]:
    """Recompute the communities of the dirty collections; return communities per collection."""
    rows = conn.execute(
        "SELECT collection_id, version FROM kb_graph_collections"
        " WHERE dirty AND (%s::bigint[] IS NULL OR collection_id = ANY(%s::bigint[]))",
        (None if collection_ids is None else list(collection_ids),) * 2,
    ).fetchall()
    conn.commit()  # no transaction stays open while Louvain and a summariser run
    done = {}
    for coll_id, version in rows:
        found = communities(load_network(conn, coll_id), summarizer=summarizer)
        conn.commit()
        with conn.transaction():
            conn.execute("DELETE FROM kb_graph_communities WHERE collection_id = %s", (coll_id,))
            if found:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO kb_graph_communities (collection_id, level, members, summary)"
                        " VALUES (%s, %s, %s, %s)",
                        [(coll_id, c.level, list(c.members), c.summary) for c in found],
                    )
            conn.execute(
                "UPDATE kb_graph_collections SET dirty = false"
                " WHERE collection_id = %s AND version = %s",
                (coll_id, version),
            )
        done[int(coll_id)] = len(found)
    return done
