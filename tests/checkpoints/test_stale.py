"""Answers pinned to their evidence: the pins, stale answers after a sync, and the follow-up's note."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage

import arcana_loop
from arcana_loop.graph import run, stale_answers
from arcana_loop.graph.replay import Record, record_of
from arcana_loop.knowledge import text_hash
from tests.fakes import ScriptedChatModel, answer, search

pytestmark = pytest.mark.postgres

DEPLOY = """# Deploy

## Rollout

A release rolls out to the canary hosts first, then to every region after one hour.

## Rollback

A rollback restores the previous release with the revert command.
"""
EDITED = DEPLOY.replace("after one hour", "after two hours")
SPOOLS = "# Spools\n\nThe winding spool holds forty metres of copper wire.\n"
HARBOR = "# Harbor\n\nThe harbor crane lifts containers of twelve tonnes.\n"


@pytest.fixture
def corpus(kb, tmp_path):
    guides, other = tmp_path / "guides", tmp_path / "other"
    guides.mkdir()
    other.mkdir()
    (guides / "deploy.md").write_text(DEPLOY)
    (guides / "spools.md").write_text(SPOOLS)
    (guides / "harbor.md").write_text(HARBOR)
    (other / "deploy.md").write_text(DEPLOY)  # the same file in another collection, never edited
    kb.ingest(guides, collection="guides")
    kb.ingest(other, collection="other")
    return guides


@pytest.fixture
def saver(tmp_path):
    return f"sqlite:{tmp_path / 'threads.db'}"


def _ask(kb, saver, query, collection, claim, *, thread_id=None, on_event=None):
    """A scripted run that searches `query` and answers `claim` citing the first hit."""
    hit = kb.search(query, collection=collection, limit=3)[0]
    model = ScriptedChatModel(responses=[search(query), answer(f"{claim} [{hit['id']}]")])
    result = run(
        claim,
        controller_llm=model,
        search_fn=kb.search,
        collection=collection,
        checkpointer=saver,
        thread_id=thread_id,
        grounder="local",
        on_event=on_event,
    )
    assert result.terminated_by == "answered"
    return result, hit, model


def test_the_answer_keeps_its_evidence_with_versions(kb, corpus, saver):
    result, hit, _ = _ask(
        kb, saver, "canary rollout", "guides", "A release rolls out to the canary hosts first."
    )
    pin = result.evidence[0]
    stored = {d.source: d for d in kb.documents("guides")}[str(corpus / "deploy.md")]
    start, end = hit["metadata"]["hit_start"], hit["metadata"]["hit_end"]
    assert pin["chunk_id"] == hit["id"] and pin["cited"] is True
    assert pin["collection"] == "guides" and pin["source"] == "deploy.md"
    assert pin["document_id"] == stored.id and pin["document_hash"] == stored.content_hash
    assert pin["span"] == [start, end]
    assert pin["text_hash"] == text_hash(hit["text"][start:end])
    assert kb.chunk_versions([hit["id"]]).chunks == {hit["id"]: pin["text_hash"]}
    # the output, the record and its file carry the pins; a record from before pins still loads
    assert json.loads(json.dumps(result.to_dict()))["evidence"] == result.evidence
    record = record_of(result.thread_id, saver)
    assert record.evidence == result.evidence
    old = {k: v for k, v in record.to_dict().items() if k not in ("evidence", "grounding", "usage")}
    assert Record(**old).evidence == []


def test_stale_names_exactly_the_threads_whose_evidence_changed(kb, corpus, saver):
    changed, rollout, _ = _ask(
        kb, saver, "canary rollout", "guides", "A release rolls out to the canary hosts first."
    )
    deleted, spool, _ = _ask(
        kb, saver, "winding spool", "guides", "The winding spool holds forty metres of wire."
    )
    same_document, rollback, _ = _ask(
        kb, saver, "rollback revert", "guides", "A rollback restores the previous release."
    )
    untouched, _, _ = _ask(
        kb, saver, "harbor crane", "guides", "The harbor crane lifts containers."
    )
    other, twin, _ = _ask(
        kb, saver, "canary rollout", "other", "A release rolls out to the canary hosts first."
    )
    assert twin["text"] == rollout["text"] and twin["id"] != rollout["id"]
    assert rollback["document_id"] == rollout["document_id"]
    assert stale_answers(saver, knowledge_base=kb) == []

    (corpus / "deploy.md").write_text(EDITED)
    (corpus / "spools.md").unlink()
    synced = kb.ingest(corpus, collection="guides", sync=True)
    assert (synced.documents_replaced, synced.documents_removed) == (1, 1)

    stale = {s.thread_id: s for s in stale_answers(saver, knowledge_base=kb)}
    assert set(stale) == {changed.thread_id, deleted.thread_id}
    assert [c["chunk_id"] for c in stale[changed.thread_id].changed] == [rollout["id"]]
    assert stale[changed.thread_id].deleted == []
    assert stale[changed.thread_id].changed[0]["source"].endswith("deploy.md")
    assert [c["chunk_id"] for c in stale[deleted.thread_id].deleted] == [spool["id"]]
    assert stale[deleted.thread_id].changed == []
    assert stale[changed.thread_id].question == changed.question
    scoped = stale_answers(saver, collection="guides", knowledge_base=kb)
    assert {s.thread_id for s in scoped} == set(stale)
    assert stale_answers(saver, collection="other", knowledge_base=kb) == []
    # "all" is every collection, as in a run's scope; a list of names is no collection
    assert {s.thread_id for s in stale_answers(saver, collection="all", knowledge_base=kb)} == set(
        stale
    )
    with pytest.raises(TypeError, match="one collection's name"):
        stale_answers(saver, collection=["guides"], knowledge_base=kb)  # type: ignore[arg-type]
    assert arcana_loop.stale_answers is stale_answers
    assert json.loads(json.dumps([s.to_dict() for s in scoped]))[0].keys() >= {
        "thread_id",
        "changed",
        "deleted",
    }
    assert {same_document.thread_id, untouched.thread_id, other.thread_id}.isdisjoint(stale)


def test_a_follow_up_says_first_that_earlier_evidence_changed(kb, corpus, saver):
    first, rollout, _ = _ask(
        kb, saver, "canary rollout", "guides", "A release rolls out to the canary hosts first."
    )
    calm, _, _ = _ask(kb, saver, "harbor crane", "guides", "The harbor crane lifts containers.")
    (corpus / "deploy.md").write_text(EDITED)
    kb.ingest(corpus, collection="guides", sync=True)

    events = []
    follow_up, _, model = _ask(
        kb,
        saver,
        "canary rollout",
        "guides",
        "A release reaches every region after two hours.",
        thread_id=first.thread_id,
        on_event=events.append,
    )
    told = follow_up.stale_evidence
    assert events[0]["event"] == "loop_start" and events[0]["stale_evidence"] == told
    assert told is not None and [c["chunk_id"] for c in told["changed"]] == [rollout["id"]]
    assert told["note"].startswith("Earlier evidence has changed") and "deploy.md" in told["note"]
    assert "1 passage of deploy.md that changed since" in told["note"]
    sent = [m for m in model.calls[0]["messages"] if isinstance(m, HumanMessage)]
    assert told["note"] in sent[-1].text  # the controller reads it before its first turn
    # answered again on today's text: the thread rests on current evidence
    assert first.thread_id not in {s.thread_id for s in stale_answers(saver, knowledge_base=kb)}

    quiet, _, model = _ask(
        kb,
        saver,
        "harbor crane",
        "guides",
        "The crane lifts twelve tonnes.",
        thread_id=calm.thread_id,
    )
    assert quiet.stale_evidence is None
    assert not any("Earlier evidence" in m.text for m in model.calls[0]["messages"])
