// The arcana-loop page: ask, stream the answer, show the evidence behind each claim.
//
// It talks to the LangGraph server that serves it: /threads and
// /threads/{id}/runs/stream (the server's own API), /ui/api/collections and
// /ui/api/evidence (ui/app.py). Text from documents and models is only ever set with
// textContent or text nodes: nothing a document holds is parsed as HTML.
"use strict";

const ASSISTANT = "arcana-loop";
// nodes/models.py tags each model call's tokens with its role (nodes/conversation.py)
const ANSWER_TAG = "arcana_loop:answer";
const CONTROLLER_TAG = "arcana_loop:controller";
const ANSWER_NAME = "answer";
const STREAM_MODES = ["messages-tuple", "values", "custom"];
const VERDICTS = { supported: "supported", unsupported: "unsupported", contradicted: "contradicted" };

const $ = (id) => document.getElementById(id);
const page = { threadId: null, running: false, collections: [], view: null, timings: [] };
window.arcanaTimings = page.timings; // first-token and end times of each run, read by the tests

class ServerDown extends Error {}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined)); // strings become text nodes
  return node;
}

function showBanner(message, kind = "error") {
  const banner = $("banner");
  banner.textContent = message;
  banner.className = `banner ${kind}`;
  banner.hidden = !message;
}

async function api(path, options = {}) {
  let response;
  try {
    response = await fetch(path, { headers: { "Content-Type": "application/json" }, ...options });
  } catch (err) {
    throw new ServerDown(`The server at ${location.origin} does not answer: is it running?`);
  }
  if (!response.ok) {
    let detail = "";
    try {
      const body = await response.json();
      detail = body.error || body.detail || body.message || "";
    } catch (err) { /* a body that is not JSON: the status says enough */ }
    throw new Error(`${response.status} ${detail || response.statusText}`.trim());
  }
  return response.json();
}

function failed(err) {
  showBanner(err.message, "error");
  $("server-status").textContent = err instanceof ServerDown ? "server down" : "";
}

// ---- collections -------------------------------------------------------------------

async function loadCollections() {
  const select = $("collection");
  const wanted = new URLSearchParams(location.search).get("collection");
  let listed;
  try {
    listed = (await api("/ui/api/collections")).collections;
    $("server-status").textContent = "connected";
  } catch (err) {
    failed(err);
    listed = [];
  }
  page.collections = listed;
  select.replaceChildren(el("option", { value: "", text: "All collections" }));
  for (const c of listed) {
    const label = c.chunks ? `${c.name} (${c.documents} documents)` : `${c.name} (empty)`;
    select.append(el("option", { value: c.name, text: label }));
  }
  const note = $("collection-note");
  note.hidden = true;
  if (wanted !== null && !listed.some((c) => c.name === wanted)) {
    select.append(el("option", { value: wanted, text: `${wanted} (not found)` }));
    note.textContent = `No collection named "${wanted}": a question asked in it gives up.`;
    note.hidden = false;
  } else if (!listed.length && $("server-status").textContent === "connected") {
    note.textContent =
      "The knowledge base is empty: ingest documents first (arcana-loop ingest PATH --collection NAME).";
    note.hidden = false;
  }
  if (wanted !== null) select.value = wanted;
}

// ---- threads -----------------------------------------------------------------------

async function loadThreads() {
  let threads;
  try {
    threads = await api("/threads/search", {
      method: "POST",
      body: JSON.stringify({
        limit: 30,
        sort_by: "updated_at",
        sort_order: "desc",
        select: ["thread_id", "updated_at", "metadata", "status"],
      }),
    });
  } catch (err) {
    failed(err);
    return;
  }
  const list = $("threads");
  list.replaceChildren();
  for (const thread of threads) {
    // a thread the page did not open has no title: named by its id's end, the random part
    // (a UUIDv7 begins with its time, the same for threads made within a minute)
    const title = (thread.metadata && thread.metadata.title) || `Thread ${thread.thread_id.slice(-8)}`;
    const button = el("button", { type: "button", class: "thread", "data-thread": thread.thread_id, text: title });
    if (thread.thread_id === page.threadId) button.classList.add("current");
    button.addEventListener("click", () => openThread(thread.thread_id));
    list.append(el("li", {}, button));
  }
}

async function openThread(threadId) {
  if (page.running) return;
  try {
    const state = await api(`/threads/${encodeURIComponent(threadId)}/state`);
    page.threadId = threadId;
    showBanner("");
    await showValues(state.values || {});
    await loadThreads();
  } catch (err) {
    failed(err);
  }
}

function newThread() {
  if (page.running) return;
  page.threadId = null;
  page.view = null;
  $("conversation").replaceChildren();
  clearEvidence();
  showBanner("");
  for (const b of document.querySelectorAll(".thread.current")) b.classList.remove("current");
  $("question").focus();
}

// ---- the answer's tokens out of the messages stream (graph/streaming.py's rule) ----

function messageText(content) {
  if (typeof content === "string") return content;
  for (const block of content || []) {
    if (typeof block === "string") return block;
    if (block && block.type === "text") return block.text || "";
  }
  return "";
}

function chunkText(content) {
  if (typeof content === "string") return content;
  return (content || []).map((b) => (typeof b === "string" ? b : b && b.type === "text" ? b.text : "")).join("");
}

// The "text" argument of a streamed `answer` tool call, from JSON cut anywhere.
function partialText(args) {
  const start = /"text"\s*:\s*"/.exec(args);
  if (!start) return null;
  const escapes = { n: "\n", t: "\t", r: "\r", b: "\b", f: "\f" };
  let out = "";
  for (let i = start.index + start[0].length; i < args.length; ) {
    const c = args[i];
    if (c === '"') break;
    if (c !== "\\") { out += c; i += 1; continue; }
    const next = args[i + 1];
    if (next === undefined) break;
    if (next === "u") {
      const hex = args.slice(i + 2, i + 6);
      if (hex.length < 4) break;
      out += String.fromCharCode(parseInt(hex, 16));
      i += 6;
    } else {
      out += escapes[next] ?? next;
      i += 2;
    }
  }
  // half of a surrogate pair is no character yet
  return /[\ud800-\udbff]$/.test(out) ? out.slice(0, -1) : out;
}

class AnswerTokens {
  constructor(show) {
    this.show = show;
    this.rewritten = false; // once the answer model writes, the controller's text was a draft
    this.messageId = null;
    this.text = "";
    this.calls = new Map();
  }

  take(chunk, metadata) {
    const tags = (metadata && metadata.tags) || [];
    if (chunk.type === "ai" && chunk.name === ANSWER_NAME) {
      this.replace(chunk.id, messageText(chunk.content)); // a give-up, a failure, an answer tool's text: whole
      return;
    }
    if (chunk.type !== "AIMessageChunk") return;
    if (tags.includes(ANSWER_TAG)) {
      if (!this.rewritten) { this.rewritten = true; this.messageId = null; }
      this.append(chunk.id, chunkText(chunk.content));
    } else if (tags.includes(CONTROLLER_TAG) && !this.rewritten) {
      const pieces = chunk.tool_call_chunks || [];
      for (const piece of pieces) this.toolCall(chunk.id, piece);
      if (!pieces.length) this.append(chunk.id, chunkText(chunk.content));
    }
  }

  toolCall(messageId, piece) {
    const key = `${messageId}/${Number.isInteger(piece.index) ? piece.index : 0}`;
    const call = this.calls.get(key) || { name: null, args: "" };
    this.calls.set(key, call);
    call.name = call.name || piece.name;
    call.args += piece.args || "";
    if (call.name && call.name !== ANSWER_NAME && this.messageId === messageId) {
      this.replace(null, ""); // text before a search is no answer
      return;
    }
    if (call.name === ANSWER_NAME) {
      const text = partialText(call.args);
      if (text) this.replace(messageId, text);
    }
  }

  append(messageId, text) {
    if (!text) return;
    if (messageId !== this.messageId) this.replace(messageId, text);
    else { this.text += text; this.show(this.text); }
  }

  replace(messageId, text) {
    this.messageId = messageId;
    this.text = text;
    this.show(text);
  }
}

// ---- server-sent events ------------------------------------------------------------

async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) !== -1) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      let event = "message";
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
    if (done) return;
  }
}

// ---- asking ------------------------------------------------------------------------

function runContext() {
  const context = {};
  const model = $("model").value.trim();
  if (model) context.controller_model = model;
  if ($("grounder").value) context.grounder = $("grounder").value;
  const turns = $("max-iterations").value;
  if (turns !== "") context.max_iterations = Number(turns);
  return context;
}

function liveTurn(question) {
  const answer = el("div", { class: "answer streaming" });
  const status = el("p", { class: "status muted", text: "Starting..." });
  const turn = el("article", { class: "turn current" }, el("p", { class: "question", text: question }), status, answer);
  $("conversation").append(turn);
  turn.scrollIntoView({ block: "end" });
  return { answer, status };
}

function plural(count, word, many = `${word}s`) {
  return `${count} ${count === 1 ? word : many}`;
}

function liveStatus(event) {
  switch (event.event) {
    case "loop_start": return "Thinking...";
    case "tool_call":
      if (event.tool === "search") {
        const found = (event.returned_chunk_ids || []).length;
        return `Turn ${event.iteration + 1}: searched "${(event.args || {}).query || ""}" and found ${plural(found, "chunk")}`;
      }
      return `Turn ${event.iteration + 1}: ${event.tool}`;
    case "ground_start": return "Checking each claim against the evidence...";
    case "ground_stop": return "Grounded.";
    case "loop_stop": return "Done.";
    default: return null;
  }
}

async function ask(question) {
  const collection = $("collection").value;
  const started = performance.now();
  const timing = { question, first_token_ms: null, end_ms: null };
  if (!page.threadId) {
    const thread = await api("/threads", {
      method: "POST",
      body: JSON.stringify({ metadata: { title: question.slice(0, 80) } }),
    });
    page.threadId = thread.thread_id;
  }
  const live = liveTurn(question);
  const tokens = new AnswerTokens((text) => {
    if (text && timing.first_token_ms === null) timing.first_token_ms = performance.now() - started;
    live.answer.textContent = text;
  });
  const input = { question };
  if (collection) input.collection = collection;
  let values = null;
  let failure = null;
  try {
    const response = await fetch(`/threads/${encodeURIComponent(page.threadId)}/runs/stream`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ assistant_id: ASSISTANT, input, context: runContext(), stream_mode: STREAM_MODES }),
    });
    if (!response.ok) {
      failure = { message: `the run could not start (${response.status} ${await response.text()})` };
    } else {
      for await (const { event, data } of events(response)) {
        if (event === "messages") tokens.take(data[0], data[1]);
        else if (event === "values") values = data;
        else if (event === "custom") live.status.textContent = liveStatus(data) || live.status.textContent;
        else if (event === "error") failure = data;
      }
    }
  } catch (err) {
    // no answer from the server, or a stream that broke off: said in the turn, not left blank
    failure = { message: `the connection to the server broke off (${err.message})` };
    $("server-status").textContent = "";
  }
  timing.end_ms = performance.now() - started;
  page.timings.push(timing);
  if (failure) {
    live.answer.classList.remove("streaming");
    live.status.replaceWith(el("p", { class: "state error", text: `The run failed: ${failure.message || failure.error || "unknown error"}` }));
    return;
  }
  if (values === null) {
    live.answer.classList.remove("streaming");
    live.status.replaceWith(el("p", { class: "state error", text: "The run ended without a state: the server sent nothing." }));
    return;
  }
  await showValues(values, timing);
}

// ---- rendering a thread ------------------------------------------------------------

async function showValues(values, timing = null) {
  const view = await api("/ui/api/evidence", { method: "POST", body: JSON.stringify({ values }) });
  page.view = view;
  renderConversation(view, timing);
  renderEvidence(view, timing);
}

function stateLine(view) {
  switch (view.terminated_by) {
    case "answered": {
      if (!view.coverage) return null;
      const score = view.score === null ? "" : ` (score ${view.score.toFixed(2)})`;
      return el("p", { class: `state ${view.coverage}`, text: `Grounding: ${view.coverage.replace("_", " ")}${score}` });
    }
    case "gave_up":
      return el("p", { class: "state gave-up", text: "Gave up: the knowledge base did not answer this question." });
    case "max_iterations": {
      const budget = { iterations: "its turns", tokens: "its tokens", seconds: "its time" }[view.budget_stop] || "its budget";
      // written from chunks only when it cites some: a budget spent before any search leaves none
      const written = view.citations.length ? " The answer below was written from the chunks gathered." : "";
      return el("p", { class: "state budget", text: `Stopped: the question spent ${budget}.${written}` });
    }
    case "error": // the closing message says why, when there is one
      return el("p", { class: "state error", text: view.answer.length ? "The run failed." : `The run failed: ${view.error || "unknown error"}` });
    default:
      return el("p", { class: "state error", text: "This question did not finish (its run stopped before an answer)." });
  }
}

// An answer's text with its citation numbers as buttons that open the passage.
function answerNode(pieces, citations, earlier = false) {
  const node = el("div", { class: earlier ? "answer earlier" : "answer" });
  for (const piece of pieces) {
    if (piece.cite === undefined) node.append(piece.text);
    else node.append(citeButton(citations, piece.cite, "cite", `[${piece.cite}]`));
  }
  if (!pieces.length) node.append("(no answer)");
  return node;
}

// `focus` shows the passage for one claim: its own highlight, and the claim it backs.
function citeButton(citations, n, kind, text, focus = null) {
  const button = el("button", { type: "button", class: kind, "data-n": String(n), title: "Show the passage", text });
  button.addEventListener("click", () => showPassage(citations, n, button.closest(".turn, .claim"), focus));
  return button;
}

function sourcesList(citations) {
  if (!citations.length) return null;
  const list = el("ol", { class: "sources" });
  for (const c of citations) list.append(el("li", {}, citeButton(citations, c.n, "source", placeOf(c))));
  return list;
}

function pagesLabel(pages) {
  return /^\d+$/.test(pages) ? `page ${pages}` : `pages ${pages}`;
}

function placeOf(c) {
  const parts = [c.title || c.source || c.chunk_id];
  // a Markdown file's title is its first heading, and so the first part of its sections
  const section = c.title && c.section && c.section.startsWith(`${c.title} > `) ? c.section.slice(c.title.length + 3) : c.section;
  if (section && section !== c.title) parts.push(section);
  if (c.pages) parts.push(pagesLabel(c.pages));
  return parts.join(" › ");
}

function renderConversation(view, timing) {
  const conversation = $("conversation");
  conversation.replaceChildren();
  for (const turn of view.earlier) {
    conversation.append(
      el("article", { class: "turn" },
        el("p", { class: "question", text: turn.question }),
        answerNode(turn.answer, turn.citations, true),
        sourcesList(turn.citations)),
    );
  }
  if (!view.question) return;
  const extracted = view.answer_kind === "extracted" && view.terminated_by !== "gave_up"
    ? el("p", { class: "muted small", text: "Extracted: passages quoted as found; no model wrote this answer." })
    : null;
  // said before the answer, as the CLI says it: the previous answer's evidence changed since
  const stale = view.stale_note ? el("p", { class: "note stale", text: view.stale_note }) : null;
  const current = el("article", { class: "turn current" },
    el("p", { class: "question", text: view.question }),
    stale,
    stateLine(view),
    extracted,
    answerNode(view.answer, view.citations),
    sourcesList(view.citations));
  if (timing && timing.first_token_ms !== null) {
    current.append(el("p", { class: "muted small", text: `First words after ${(timing.first_token_ms / 1000).toFixed(2)} s, done after ${(timing.end_ms / 1000).toFixed(2)} s.` }));
  }
  conversation.append(current);
  current.scrollIntoView({ block: "end" });
}

function clearEvidence() {
  $("passage").hidden = true;
  $("claims-section").hidden = true;
  $("steps-section").hidden = true;
  $("evidence-hint").hidden = false;
}

function foundByText(found) {
  return found ? `turn ${found.turn}, search "${found.query || ""}"` : "no search of this question";
}

function renderEvidence(view) {
  clearEvidence();
  const claims = $("claims");
  claims.replaceChildren();
  for (const claim of view.claims) {
    const verdict = VERDICTS[claim.verdict] || "unsupported";
    const item = el("li", { class: `claim ${verdict}` },
      el("span", { class: `verdict ${verdict}`, text: verdict }), " ", claim.text);
    if (claim.evidence.length) {
      const passages = el("div", { class: "muted small", text: verdict === "supported" ? "Backed by " : "Compared with " });
      for (const e of claim.evidence) {
        passages.append(citeButton(view.citations, e.n, "cite", `[${e.n}]`, { highlight: e.highlight, claim: claim.text }), " ");
      }
      item.append(passages);
    }
    item.append(el("div", { class: "muted small", text: `Evidence first found by ${foundByText(claim.found_by)}` }));
    claims.append(item);
  }
  $("claims-section").hidden = !view.claims.length;
  const t = view.totals;
  $("steps-summary").textContent =
    `Steps: ${plural(t.turns, "turn")}, ${plural(t.searches, "search", "searches")}, ${plural(t.chunks, "chunk")} kept, ${plural(t.tokens, "token")}, ${t.seconds.toFixed(2)} s`;
  const steps = $("steps");
  steps.replaceChildren();
  for (const step of view.steps) {
    let text = `Turn ${step.turn}: ${step.tool}`;
    if (step.tool === "search") {
      text += ` "${step.query || ""}"`;
      text += step.duplicate_of ? ` (repeats turn ${step.duplicate_of}, not sent again)` : ` → ${plural(step.chunks, "chunk")}`;
      if (step.error) text += ` (failed: ${step.error})`;
    }
    steps.append(el("li", { text }));
  }
  $("steps-section").hidden = false;
  $("evidence-hint").textContent = view.citations.length
    ? "Click a citation number to see the passage it points to."
    : "This answer cites no passage.";
}

// The server counts a text's characters as Python does (code points); a JS string counts
// UTF-16 units, two for a character past U+FFFF (an emoji): the index of code point `at`.
function unitIndex(text, at) {
  let unit = 0;
  for (let point = 0; point < at && unit < text.length; point++) {
    const code = text.charCodeAt(unit);
    unit += code >= 0xd800 && code <= 0xdbff ? 2 : 1;
  }
  return unit;
}

function showPassage(citations, n, scope, focus = null) {
  const found = citations.find((x) => x.n === n);
  if (!found) return;
  const c = focus ? { ...found, ...focus } : found;
  for (const b of document.querySelectorAll(".cite.open, .source.open")) b.classList.remove("open");
  for (const b of (scope || document).querySelectorAll(`[data-n="${n}"]`)) b.classList.add("open");
  $("passage-title").textContent = `[${c.n}] ${c.title || c.chunk_id}`;
  const meta = $("passage-meta");
  meta.replaceChildren();
  const rows = [
    ["Path", c.source],
    ["Section", c.section],
    ["Pages", c.pages],
    ["Collection", c.collection],
    ["First found by", c.partial ? null : foundByText(c.found_by)],
    ["Backs", c.claim],
  ];
  for (const [name, value] of rows) {
    if (value) meta.append(el("dt", { text: name }), el("dd", { class: name.toLowerCase().replace(/ /g, "-"), text: value }));
  }
  const text = $("passage-text");
  text.replaceChildren();
  if (!c.text) text.append("(the passage's text is not in this question's chunks)");
  else if (c.highlight) {
    const [start, end] = c.highlight.map((at) => unitIndex(c.text, at));
    text.append(c.text.slice(0, start), el("mark", { text: c.text.slice(start, end) }), c.text.slice(end));
  } else text.append(c.text);
  if (c.partial) text.append(el("span", { class: "muted", text: " … (an earlier question's passage: its start only)" }));
  $("evidence-hint").hidden = true;
  $("passage").hidden = false;
  $("passage").scrollIntoView({ block: "nearest" });
}

// ---- wiring ------------------------------------------------------------------------

async function onAsk(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || page.running) return;
  page.running = true;
  $("ask").disabled = true;
  showBanner("");
  try {
    await ask(question);
    $("question").value = "";
  } catch (err) {
    failed(err);
  } finally {
    page.running = false;
    $("ask").disabled = false;
    document.body.dataset.runs = String(page.timings.length);
  }
  await loadThreads();
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", onAsk);
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("ask-form").requestSubmit();
  });
  $("new-thread").addEventListener("click", newThread);
  loadCollections().then(loadThreads);
});
