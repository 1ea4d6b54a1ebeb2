// The timerwheel console page: plain DOM over the console's JSON endpoints (console/app.py).
// Every text from the server goes in with textContent, never as HTML.
"use strict";

const TOKEN_KEY = "timerwheel.console.token";
const REFRESH_MS = 5000;
const $ = (id) => document.getElementById(id);
const state = { topic: "", pageTokens: [""], dueChart: null, latenessChart: null };
const inFlight = {}; // panel name -> the AbortController of its request in flight
// What console-ops.js adds: called with each timer drawn, each topic chosen, and panels
// the refresh reloads ({name: load}).
const hooks = { timer: [], topic: [], panels: {} };

// == talking to the console =================================================================
class ApiError extends Error {
  constructor(status, body) {
    super(body.error || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || "";
  }
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { ...options, headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new ApiError(response.status, body);
    if (response.status === 401 || response.status === 403) showAuth(error.message);
    throw error;
  }
  return body;
}

// Answers can come back out of order: a refresh's request for the topic shown before may
// finish after the click's for the next one, and would draw the old topic over the new.
// So a panel has one request at a time: a new one aborts the one in flight, and an aborted
// request's answer is never drawn (null here; the browser cancels it, and its error too).
async function panelApi(panel, path, options = {}) {
  inFlight[panel]?.abort();
  const controller = new AbortController();
  inFlight[panel] = controller;
  try {
    const answer = await api(path, { ...options, signal: controller.signal });
    return controller.signal.aborted ? null : answer;
  } catch (error) {
    if (controller.signal.aborted) return null;
    throw error;
  } finally {
    if (inFlight[panel] === controller) delete inFlight[panel];
  }
}

function showError(id, error) {
  $(id).textContent = error ? error.message : "";
}

// == the token ===============================================================================
function showAuth(message) {
  $("auth").hidden = false;
  $("auth-message").textContent = message;
}

function showTokenStatus() {
  const has = Boolean(sessionStorage.getItem(TOKEN_KEY));
  $("token-status").textContent = has ? "using a token" : "";
  $("forget-token").hidden = !has;
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-input").value = "";
  $("auth").hidden = true;
  showTokenStatus();
  refresh();
});

$("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showTokenStatus();
  refresh();
});

// == small DOM helpers =======================================================================
function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) {
    const td = el("td");
    if (cell instanceof Node) td.appendChild(cell);
    else td.textContent = cell;
    tr.appendChild(td);
  }
  return tr;
}

function when(moment) {
  return moment ? `${moment.iso}  (${moment.relative})` : "–";
}

function stateBadge(name) {
  return el("span", name, `state state-${name}`);
}

function idLink(messageId) {
  const link = el("a", messageId, "mono");
  link.addEventListener("click", () => lookup(messageId));
  return link;
}

// == a timer: look up, fields, trace, cancel ==================================================
async function lookup(messageId) {
  $("lookup-id").value = messageId;
  showError("lookup-error", null);
  try {
    const answer = await panelApi("timer", `/api/timer?id=${encodeURIComponent(messageId)}`);
    if (answer) renderTimer(answer.timer);
  } catch (error) {
    $("timer").hidden = true;
    showError("lookup-error", error);
  }
}

function renderTimer(timer) {
  const fields = $("timer-fields");
  fields.replaceChildren();
  const add = (name, value) => {
    const tr = el("tr");
    tr.appendChild(el("th", name));
    const td = el("td");
    td.dataset.field = name;
    if (value instanceof Node) td.appendChild(value);
    else td.textContent = value;
    tr.appendChild(td);
    fields.appendChild(tr);
  };
  add("message id", el("span", timer.message_id, "mono"));
  add("topic", timer.topic);
  add("state", stateBadge(timer.state));
  add("deliver at", when(timer.deliver_at));
  add("created at", when(timer.created_at));
  if (timer.wheel) add("wheel", timer.wheel);
  if (timer.fired_at) add("fired at", when(timer.fired_at));
  if (timer.acked_at) add("acked at", when(timer.acked_at));
  if (timer.cancelled_at) add("cancelled at", when(timer.cancelled_at));
  if (timer.schedule) add("schedule", timer.schedule);
  if (timer.next) add("next occurrence", timer.next);
  if (timer.paused) add("paused", "yes: its occurrences are skipped until it is resumed");
  add("attempts", String(timer.attempts));
  const properties = Object.entries(timer.properties).map(([k, v]) => `${k}=${v}`);
  add("properties", properties.length ? properties.join("\n") : "–");
  add("body", el("pre", `${timer.body_bytes} bytes\n${timer.body_preview}`, "body"));

  const tbody = $("trace").querySelector("tbody");
  tbody.replaceChildren(
    ...timer.trace.map((e) => row([e.at.iso, e.at.relative, e.kind, e.what]))
  );
  $("trace-empty").hidden = timer.trace.length > 0;
  $("cancel-button").hidden = timer.state !== "SCHEDULED";
  const series = timer.state === "SCHEDULED" && Boolean(timer.repeat);
  $("pause-button").hidden = !series || timer.paused;
  $("resume-button").hidden = !series || !timer.paused;
  $("cancel-confirm").hidden = true;
  $("cancel-id").textContent = timer.message_id;
  $("timer").hidden = false;
  for (const hook of hooks.timer) hook(timer);
}

$("lookup-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const messageId = $("lookup-id").value.trim();
  if (messageId) lookup(messageId);
});

$("cancel-button").addEventListener("click", () => {
  $("cancel-button").hidden = true;
  $("cancel-confirm").hidden = false;
});

$("cancel-no").addEventListener("click", () => {
  $("cancel-confirm").hidden = true;
  $("cancel-button").hidden = false;
});

// Pause or resume the series shown (no confirmation: either is undone by the other).
async function pauseOrResume(action) {
  const seriesId = $("cancel-id").textContent;
  try {
    const answer = await panelApi("timer", `/api/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ series_id: seriesId }),
    });
    if (!answer) return;
    renderTimer(answer.timer);
    refresh();
  } catch (error) {
    showError("lookup-error", error);
  }
}

$("pause-button").addEventListener("click", () => pauseOrResume("pause"));
$("resume-button").addEventListener("click", () => pauseOrResume("resume"));

$("cancel-yes").addEventListener("click", async () => {
  const messageId = $("cancel-id").textContent;
  try {
    // The timer panel's request: a look-up still in flight would draw the state before
    // the cancel over it, so it is aborted; a look-up made after it supersedes it.
    const answer = await panelApi("timer", "/api/cancel", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message_id: messageId }),
    });
    if (!answer) return;
    renderTimer(answer.timer);
    refresh();
  } catch (error) {
    showError("lookup-error", error);
  }
});

// == purge a topic, redrive a dead-letter topic: each through a confirmation ===============
const BULK = {
  purge: {
    question: (t) => `Purge ${t}? Its pending timers are cancelled and its fired, not acked ` +
      "messages (dead letters, on a dead-letter topic) are dropped: none is delivered.",
    path: "/api/purge",
    body: (t) => ({ topic: t }),
    done: (a) => `${a.topic}: cancelled ${a.cancelled}, purged ${a.purged}`,
  },
  redrive: {
    question: (t) => `Move every dead letter of ${t} back to the topic it came from?`,
    path: "/api/redrive",
    body: (t) => ({ dead_letter_topic: t }),
    done: (a) => `${a.dead_letter_topic}: moved ${a.moved} back`,
  },
};

function askBulk(action) {
  const topic = $("bulk-topic").value.trim();
  showError("bulk-error", null);
  $("bulk-result").textContent = "";
  if (!topic) {
    $("bulk-error").textContent = "Give a topic first.";
    return;
  }
  state.bulk = { action, topic };
  $("bulk-question").textContent = BULK[action].question(topic);
  $("bulk-confirm").hidden = false;
}

$("purge-button").addEventListener("click", () => askBulk("purge"));
$("redrive-button").addEventListener("click", () => askBulk("redrive"));

$("bulk-no").addEventListener("click", () => {
  $("bulk-confirm").hidden = true;
  state.bulk = null;
});

$("bulk-yes").addEventListener("click", async () => {
  const { action, topic } = state.bulk || {};
  $("bulk-confirm").hidden = true;
  state.bulk = null;
  if (!action) return;
  const how = BULK[action];
  try {
    const answer = await panelApi("bulk", how.path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(how.body(topic)),
    });
    if (!answer) return;
    $("bulk-result").textContent =
      how.done(answer) + (answer.more ? "; more remain: click again" : "");
    refresh();
  } catch (error) {
    showError("bulk-error", error);
  }
});

// == topics and their pending timers ===========================================================
async function loadTopics() {
  try {
    const answer = await panelApi("topics", "/api/topics");
    if (!answer) return;
    const tbody = $("topics").querySelector("tbody");
    tbody.replaceChildren(
      ...answer.topics.map((t) => {
        const link = el("a", t.topic);
        link.addEventListener("click", () => selectTopic(t.topic));
        return row([link, String(t.pending), String(t.fired_unacked)]);
      })
    );
    $("topics-empty").hidden = answer.topics.length > 0;
    // One page only: a server with many topics says how many there are in all.
    $("topics-more").hidden = !answer.next_page_token;
    $("topics-more").textContent = `The first ${answer.topics.length} of ${answer.total} topics, by name.`;
    showError("topics-error", null);
    if (!state.topic && answer.topics.length) {
      const busiest = answer.topics.reduce((a, b) => (b.pending > a.pending ? b : a));
      selectTopic(busiest.topic);
    }
  } catch (error) {
    showError("topics-error", error);
  }
}

function selectTopic(topic) {
  state.topic = topic;
  state.pageTokens = [""];
  $("pending-topic-input").value = topic;
  $("bulk-topic").value = topic;
  loadPending();
  loadDue();
  for (const hook of hooks.topic) hook(topic);
}

async function loadPending() {
  const topic = state.topic;
  const token = state.pageTokens[state.pageTokens.length - 1];
  $("pending-topic").textContent = topic || "–";
  if (!topic) return;
  try {
    const query = new URLSearchParams({ topic, limit: "20", page_token: token });
    const answer = await panelApi("pending", `/api/pending?${query}`);
    if (!answer) return;
    const tbody = $("pending").querySelector("tbody");
    tbody.replaceChildren(
      ...answer.timers.map((t) =>
        row([idLink(t.message_id), t.deliver_at.iso, t.deliver_at.relative, t.wheel])
      )
    );
    state.nextToken = answer.next_page_token;
    $("pending-next").disabled = !answer.next_page_token;
    $("pending-first").disabled = state.pageTokens.length === 1;
    $("pending-page").textContent = `page ${state.pageTokens.length}, ${answer.timers.length} timers`;
    showError("pending-error", null);
  } catch (error) {
    showError("pending-error", error);
  }
}

$("pending-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const topic = $("pending-topic-input").value.trim();
  if (topic) selectTopic(topic);
});

$("pending-next").addEventListener("click", () => {
  state.pageTokens.push(state.nextToken);
  loadPending();
});

$("pending-first").addEventListener("click", () => {
  state.pageTokens = [""];
  loadPending();
});

// == charts (Chartist, vendored) =============================================================
async function loadDue() {
  if (!state.topic) return;
  try {
    const answer = await panelApi("due", `/api/due?topic=${encodeURIComponent(state.topic)}`);
    if (!answer) return;
    const labels = answer.minutes.map((m) => m.minute.iso.slice(11, 16));
    // An empty minute is a hole (no bar), so each bar is a minute with timers.
    const counts = answer.minutes.map((m) => (m.count > 0 ? m.count : null));
    const data = { labels, series: [counts] };
    $("due-topic").textContent = answer.topic;
    $("due-total").textContent = String(answer.minutes.reduce((n, m) => n + m.count, 0));
    const options = {
      axisX: { labelInterpolationFnc: (value, index) => (index % 10 === 0 ? value : null) },
      axisY: { onlyInteger: true },
      low: 0,
    };
    if (state.dueChart) state.dueChart.update(data);
    else state.dueChart = new Chartist.BarChart("#due-chart", data, options);
    showError("due-error", null);
  } catch (error) {
    showError("due-error", error);
  }
}

async function loadLateness() {
  try {
    const answer = await panelApi("lateness", "/api/lateness");
    if (!answer) return;
    const minutes = answer.minutes;
    $("lateness-empty").hidden = minutes.length > 0;
    const data = {
      labels: minutes.map((m) => m.minute.iso.slice(11, 16)),
      series: [
        minutes.map((m) => m.p50_ms),
        minutes.map((m) => m.p99_ms),
        minutes.map((m) => m.max_ms),
      ],
    };
    const options = {
      low: 0,
      axisX: {
        labelInterpolationFnc: (value, index) =>
          index % Math.max(1, Math.ceil(minutes.length / 8)) === 0 ? value : null,
      },
    };
    if (state.latenessChart) state.latenessChart.update(data);
    else state.latenessChart = new Chartist.LineChart("#lateness-chart", data, options);
    showError("lateness-error", null);
  } catch (error) {
    showError("lateness-error", error);
  }
}

// == live refresh ============================================================================
// After an action (a token, a cancel) every panel reloads, superseding what is in flight.
// The periodic tick reloads only the panels whose last request has come back, so a server
// slower than REFRESH_MS still gets each panel drawn instead of every request aborted.
function refresh({ onlyIdle = false } = {}) {
  $("clock").textContent = new Date().toISOString().slice(0, 19).replace("T", " ") + " UTC";
  const loaders = { topics: loadTopics, lateness: loadLateness, ...hooks.panels };
  if (state.topic) Object.assign(loaders, { due: loadDue, pending: loadPending });
  for (const [panel, load] of Object.entries(loaders)) {
    if (!(onlyIdle && inFlight[panel])) load();
  }
}

showTokenStatus();
refresh();
setInterval(() => refresh({ onlyIdle: true }), REFRESH_MS);
