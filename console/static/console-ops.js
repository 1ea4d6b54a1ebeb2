// The console's operator views and timer actions (console/ops.py): in flight, consumers and
// lag, search, the throughput chart, fire now and reschedule. It runs after console.js and
// uses its helpers ($, api, panelApi, el, row, idLink, showError, state, hooks, lookup).
"use strict";

const THROUGHPUT_POLL_MS = 2000;
const THROUGHPUT_POINTS = 90; // three minutes of 2-second rates
const ops = { inflightTopic: "", search: null, searchTokens: [""], samples: [], move: null };

// == fire now and reschedule, each through a confirmation =====================================
hooks.timer.push((timer) => {
  const scheduled = timer.state === "SCHEDULED";
  $("fire-button").hidden = !scheduled;
  $("reschedule-box").hidden = !scheduled;
  // A question stays open while the timer it is about is drawn again, still scheduled (a
  // look-up answered after the click); another timer, or one that moved on, closes it.
  if (ops.move && scheduled && ops.move.body.message_id === timer.message_id) return;
  $("move-confirm").hidden = true;
  ops.move = null;
});

function askMove(move, question) {
  ops.move = move;
  $("move-question").textContent = question;
  $("move-confirm").hidden = false;
}

$("fire-button").addEventListener("click", () => {
  const messageId = $("cancel-id").textContent;
  askMove(
    { path: "/api/fire-now", body: { message_id: messageId } },
    `Fire ${messageId} now? It is delivered at once, not at its time.`
  );
});

$("reschedule-button").addEventListener("click", () => {
  const messageId = $("cancel-id").textContent;
  const when = $("reschedule-when").value.trim();
  showError("lookup-error", null);
  if (!when) {
    $("lookup-error").textContent = "Give the new time (ISO 8601, UTC) or a delay such as 10m.";
    return;
  }
  askMove(
    { path: "/api/reschedule", body: { message_id: messageId, when } },
    `Move ${messageId} to ${when}?`
  );
});

$("move-no").addEventListener("click", () => {
  $("move-confirm").hidden = true;
  ops.move = null;
});

$("move-yes").addEventListener("click", async () => {
  const move = ops.move;
  $("move-confirm").hidden = true;
  ops.move = null;
  if (!move) return;
  try {
    const answer = await panelApi("timer", move.path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(move.body),
    });
    if (!answer) return;
    renderTimer(answer.timer);
    refresh();
  } catch (error) {
    showError("lookup-error", error);
  }
});

// == in flight: fired, not acked messages of the chosen topic ================================
async function loadInflight() {
  const topic = state.topic;
  $("inflight-topic").textContent = topic || "–";
  if (!topic) return;
  try {
    const answer = await panelApi("inflight", `/api/inflight?topic=${encodeURIComponent(topic)}`);
    if (!answer) return;
    const due = (m) => {
      if (!m.in_flight) return "waiting for a consumer";
      const seconds = (m.ack_due_in_ms / 1000).toFixed(1);
      return m.ack_due_in_ms > 0 ? `in ${seconds}s` : `overdue ${-seconds}s`;
    };
    $("inflight").querySelector("tbody").replaceChildren(
      ...answer.messages.map((m) =>
        row([idLink(m.message_id), String(m.attempt), m.consumer || "–", m.peer || "–", due(m)])
      )
    );
    $("inflight-summary").textContent =
      `${answer.fired_unacked} fired, not acked; the delivery hub holds ${answer.tracked}` +
      (answer.messages.length < answer.tracked ? ` (the first ${answer.messages.length} shown)` : "");
    $("inflight-note").textContent = answer.untracked_reason;
    showError("inflight-error", null);
  } catch (error) {
    $("inflight").querySelector("tbody").replaceChildren();
    showError("inflight-error", error);
  }
}

// == consumers and lag =========================================================================
async function loadConsumers() {
  try {
    const answer = await panelApi("consumers", "/api/consumers");
    if (!answer) return;
    $("lag").querySelector("tbody").replaceChildren(
      ...answer.lag.map((t) =>
        row([
          t.topic, String(t.consumers), String(t.pending), String(t.fired_unacked),
          String(t.in_flight), t.oldest_unacked ? t.oldest_unacked.relative : "–",
        ])
      )
    );
    $("consumers").querySelector("tbody").replaceChildren(
      ...answer.consumers.map((c) =>
        row([
          c.topic, c.consumer + (c.draining ? " (stopping)" : ""), c.peer,
          `${c.in_flight} / ${c.max_in_flight}`, c.connected_at ? c.connected_at.relative : "–",
        ])
      )
    );
    $("consumers-empty").hidden = answer.consumers.length > 0;
    showError("consumers-error", null);
  } catch (error) {
    showError("consumers-error", error);
  }
}

// == search ======================================================================================
function epochMs(text, name) {
  if (!text) return "";
  const zoned = /(Z|[+-]\d\d:?\d\d)$/i.test(text) ? text : `${text}Z`; // UTC unless it says
  const ms = Date.parse(zoned);
  if (Number.isNaN(ms)) throw new Error(`${name}: "${text}" is not a time; e.g. 2030-01-01T09:00`);
  return String(ms);
}

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  showError("search-error", null);
  const query = new URLSearchParams({ topic: $("search-topic").value.trim(), limit: "20" });
  try {
    const prefix = $("search-prefix").value.trim();
    if (prefix) query.set("id_prefix", prefix);
    for (const pair of $("search-property").value.split(",")) {
      if (pair.trim()) query.append("property", pair.trim());
    }
    const from = epochMs($("search-from").value.trim(), "from");
    const to = epochMs($("search-to").value.trim(), "to");
    if (from) query.set("from_ms", from);
    if (to) query.set("to_ms", to);
  } catch (error) {
    showError("search-error", error);
    return;
  }
  ops.search = query;
  ops.searchTokens = [""];
  loadSearch();
});

async function loadSearch() {
  if (!ops.search) return;
  const query = new URLSearchParams(ops.search);
  query.set("page_token", ops.searchTokens[ops.searchTokens.length - 1]);
  try {
    const answer = await panelApi("search", `/api/search?${query}`);
    if (!answer) return;
    $("search-results").querySelector("tbody").replaceChildren(
      ...answer.timers.map((t) => {
        const properties = Object.entries(t.properties).map(([k, v]) => `${k}=${v}`).join(", ");
        return row([idLink(t.message_id), t.deliver_at.iso, t.deliver_at.relative, properties]);
      })
    );
    ops.searchNext = answer.next_page_token;
    $("search-next").disabled = !answer.next_page_token;
    $("search-first").disabled = ops.searchTokens.length === 1;
    $("search-page").textContent =
      `page ${ops.searchTokens.length}, ${answer.timers.length} timers` +
      (answer.next_page_token ? "; more may match" : "");
    showError("search-error", null);
  } catch (error) {
    showError("search-error", error);
  }
}

$("search-next").addEventListener("click", () => {
  ops.searchTokens.push(ops.searchNext);
  loadSearch();
});

$("search-first").addEventListener("click", () => {
  ops.searchTokens = [""];
  loadSearch();
});

// == throughput: rates from the engine's counters, drawn as inline SVG ==========================
const SVG = "http://www.w3.org/2000/svg";
const SERIES = ["sends", "fires", "acks"];

async function pollThroughput() {
  try {
    const answer = await panelApi("throughput", "/api/throughput");
    if (!answer) return;
    const last = ops.samples[ops.samples.length - 1];
    ops.samples.push(answer);
    if (ops.samples.length > THROUGHPUT_POINTS + 1) ops.samples.shift();
    if (last && answer.now_ms > last.now_ms) drawThroughput();
    showError("throughput-error", null);
  } catch (error) {
    showError("throughput-error", error);
  }
}

function rates() {
  const points = [];
  for (let i = 1; i < ops.samples.length; i++) {
    const a = ops.samples[i - 1];
    const b = ops.samples[i];
    const seconds = (b.now_ms - a.now_ms) / 1000;
    if (seconds <= 0) continue;
    const point = {};
    for (const name of SERIES) {
      point[name] = Math.max(0, b[`${name}_total`] - a[`${name}_total`]) / seconds;
    }
    points.push(point);
  }
  return points;
}

function drawThroughput() {
  const points = rates();
  const svg = $("throughput-chart");
  const [width, height, left, bottom] = [600, 170, 36, 14];
  const top = Math.max(1, ...points.flatMap((p) => SERIES.map((s) => p[s])));
  const x = (i) => left + (i * (width - left - 4)) / Math.max(1, THROUGHPUT_POINTS - 1);
  const y = (v) => height - bottom - (v / top) * (height - bottom - 8);
  const children = [];
  for (const [value, label] of [[top, top.toFixed(top < 10 ? 1 : 0)], [0, "0"]]) {
    const text = document.createElementNS(SVG, "text");
    text.setAttribute("x", "2");
    text.setAttribute("y", String(y(value) + 3));
    text.textContent = label;
    children.push(text);
  }
  for (const name of SERIES) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", name);
    line.setAttribute("points", points.map((p, i) => `${x(i).toFixed(1)},${y(p[name]).toFixed(1)}`).join(" "));
    line.dataset.latest = points.length ? points[points.length - 1][name].toFixed(2) : "0";
    children.push(line);
  }
  svg.replaceChildren(...children);
  const latest = points[points.length - 1];
  $("throughput-latest").textContent = latest
    ? SERIES.map((s) => `${s} ${latest[s].toFixed(1)}/s`).join(", ")
    : "";
}

// == wiring ====================================================================================
hooks.topic.push((topic) => {
  if (!$("search-topic").value) $("search-topic").value = topic;
  loadInflight();
});
Object.assign(hooks.panels, { inflight: loadInflight, consumers: loadConsumers });
loadConsumers();
pollThroughput();
setInterval(() => {
  if (!inFlight.throughput) pollThroughput();
}, THROUGHPUT_POLL_MS);
