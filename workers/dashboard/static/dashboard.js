// The cloudqueue dashboard page: polls /api/state and redraws. No build step, no framework.
// Every text that comes from the queues (ids, errors) is set with textContent, never as HTML.
"use strict";

const COUNTERS = [
  ["threads", "threads", (v) => fmtInt(v)],
  ["target_threads", "target threads", (v) => fmtInt(v)],
  ["visible_depth", "visible messages", (v) => fmtInt(v)],
  ["in_flight", "in flight", (v) => fmtInt(v)],
  ["processed_per_s", "processed / s", (v) => v.toFixed(1)],
  ["oldest_message_age_s", "oldest message", (v) => fmtAge(v)],
  ["counters.items_processed", "items processed", (v) => fmtInt(v)],
  ["counters.processed", "messages processed", (v) => fmtInt(v)],
  ["counters.failed", "failed (retried)", (v) => fmtInt(v)],
  ["counters.poisoned", "poisoned", (v) => fmtInt(v)],
  ["counters.storage_transactions_per_hour", "transactions / hour", (v) => fmtInt(v), true],
  ["counters.projected_cost_per_month_usd", "cost / month", (v) => "$" + v.toFixed(2), true],
];
// [field, label, format, shown only when the value is known]

const COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563"];
const views = new Map(); // queue name -> {section, charts, workerIds}
let intervalMs = 1000;

function fmtInt(v) {
  return v == null ? "–" : Math.round(v).toLocaleString("en-US");
}

function fmtAge(seconds) {
  if (seconds < 120) return seconds.toFixed(0) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(0) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

function field(object, path) {
  return path.split(".").reduce((value, key) => (value == null ? undefined : value[key]), object);
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

async function refresh() {
  try {
    const response = await fetch("/api/state", { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error((await response.json()).error || response.statusText);
    render(await response.json());
  } catch (error) {
    document.getElementById("updated").textContent = "not updated: " + error.message;
  } finally {
    setTimeout(refresh, intervalMs);
  }
}

function render(state) {
  intervalMs = Math.max(200, state.interval_s * 1000);
  document.getElementById("storage").textContent = state.storage;
  document.getElementById("updated").textContent =
    "updated " + new Date(state.at).toLocaleTimeString();
  document.getElementById("empty").hidden = state.queues.length > 0;
  for (const queue of state.queues) renderQueue(queue);
  renderGroups(state.groups || []);
}

// Groups running, or ended in the last minutes: one row each, keyed by the group id.
function renderGroups(groups) {
  document.getElementById("groups").hidden = groups.length === 0;
  document.querySelector('[data-field="group-rows"]').replaceChildren(
    ...groups.map((group) => {
      if (group.error) return rowOf([group.error]);
      const row = rowOf([
        group.group,
        group.state,
        fmtInt(group.handled),
        fmtInt(group.poisoned),
        fmtInt(group.pending),
        fmtInt(group.total),
        fmtAge(group.age_s),
        group.on_complete,
      ]);
      row.setAttribute("data-group", group.group);
      return row;
    }),
  );
}

function renderQueue(queue) {
  let view = views.get(queue.queue);
  if (!view) {
    view = createView(queue.queue);
    views.set(queue.queue, view);
  }
  const { section } = view;
  section.querySelector(".error").textContent = queue.error || "";
  section.querySelector(".body").hidden = Boolean(queue.error);
  if (queue.error) return;
  for (const [name, , format, optional] of COUNTERS) {
    const value = field(queue, name);
    const box = section.querySelector(`[data-counter="${name}"]`);
    box.hidden = Boolean(optional) && value == null;
    box.querySelector(".value").textContent = value == null ? "–" : format(value);
  }
  drawCharts(view, queue.history);
  renderWorkers(section, queue.workers);
  renderPoison(section, queue);
}

function createView(name) {
  const counters = el("div", { class: "counters" });
  for (const [fieldName, label] of COUNTERS) {
    const dataName = fieldName.split(".").pop();
    counters.append(
      el(
        "div",
        { class: "counter", "data-counter": fieldName },
        el("span", { class: "label" }, label),
        el("span", { class: "value", "data-field": dataName }, "–"),
      ),
    );
  }
  const backlog = el("div", { class: "chart" }, el("h3", {}, "Backlog and throughput"));
  const threads = el("div", { class: "chart" }, el("h3", {}, "Dequeue threads"));
  const section = el(
    "section",
    { class: "queue", "data-queue": name },
    el("h2", {}, name),
    el("p", { class: "error" }),
    el(
      "div",
      { class: "body" },
      counters,
      el("div", { class: "charts" }, backlog, threads),
      workersBlock(),
      poisonBlock(name),
    ),
  );
  document.getElementById("queues").append(section);
  return { section, backlog, threads, charts: {}, workerIds: "" };
}

function workersBlock() {
  const head = el("tr");
  const labels = ["worker", "threads", "peak", "messages", "failed", "poisoned", "msg/s"];
  for (const label of [...labels, "running handlers"]) {
    head.append(el("th", {}, label));
  }
  return el(
    "div",
    { class: "workers" },
    el("h3", {}, "Workers"),
    el("table", {}, el("thead", {}, head), el("tbody")),
  );
}

function poisonBlock(queue) {
  const head = el("tr");
  for (const label of ["original id", "reason", "dequeues", "poisoned on", "error", ""]) {
    head.append(el("th", {}, label));
  }
  const all = el("button", { type: "button", "data-action": "requeue-all" }, "Requeue all");
  all.addEventListener("click", () => {
    // As `cloudqueue poison requeue` asks first: every message goes back at once.
    if (window.confirm(`Move every poisoned message back to ${queue}?`)) requeue(queue, {});
  });
  return el(
    "div",
    { class: "poison" },
    el(
      "h3",
      {},
      "Poison queue: ",
      el("span", { "data-field": "poison-count" }, "0"),
      " message(s) ",
      all,
      el("span", { class: "message", "data-field": "requeue-result" }),
    ),
    el("table", {}, el("thead", {}, head), el("tbody")),
  );
}

function renderWorkers(section, workers) {
  const body = section.querySelector(".workers tbody");
  body.replaceChildren(
    ...workers.map((worker) =>
      rowOf([
        `${worker.worker} (${worker.id})` + prioritySet(worker),
        fmtInt(worker.active_threads),
        fmtInt(worker.peak_threads),
        fmtInt(worker.processed),
        fmtInt(worker.failed),
        fmtInt(worker.poisoned),
        worker.rate_per_s == null ? "measuring" : worker.rate_per_s.toFixed(1),
        progressOf(worker),
      ]),
    ),
  );
}

// Each held message's last progress report (`current_envelope().progress`), as status shows it.
function progressOf(worker) {
  return (worker.progress || [])
    .map((report) => `${Math.round(report.fraction * 100)}% ${report.detail}`.trim())
    .join("; ");
}

// A worker on several queues shares its threads among them, highest priority first.
function prioritySet(worker) {
  return worker.priority_set ? ` on ${worker.priority_set.join(" > ")}` : "";
}

function renderPoison(section, queue) {
  const poison = queue.poison;
  section.querySelector('[data-field="poison-count"]').textContent = fmtInt(poison.count);
  section.querySelector('[data-action="requeue-all"]').hidden = poison.count === 0;
  const body = section.querySelector(".poison tbody");
  body.replaceChildren(
    ...poison.latest.map((record) => {
      const id = record.original_id || record.poison_id;
      const row = rowOf([
        id,
        record.reason || "–",
        record.dequeue_count == null ? "–" : String(record.dequeue_count),
        record.poisoned_on ? new Date(record.poisoned_on).toLocaleString() : "–",
        record.error.split("\n")[0],
      ]);
      row.lastChild.className = "error-text";
      const button = el("button", { type: "button", "data-action": "requeue" }, "Requeue");
      button.addEventListener("click", () => requeue(queue.queue, { id }));
      row.append(el("td", {}, button));
      return row;
    }),
  );
}

function rowOf(cells) {
  const row = el("tr");
  for (const cell of cells) row.append(el("td", {}, cell));
  return row;
}

async function requeue(queue, body) {
  const section = views.get(queue).section;
  const result = section.querySelector('[data-field="requeue-result"]');
  result.textContent = "requeueing…";
  try {
    const response = await fetch(`/api/queues/${encodeURIComponent(queue)}/poison/requeue`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    result.textContent = response.ok
      ? `requeued ${answer.moved} message(s)`
      : "not requeued: " + answer.error;
  } catch (error) {
    result.textContent = "not requeued: " + error.message;
  }
}

// -- Charts (uPlot) --------------------------------------------------------------------------

function chartWidth(container) {
  return Math.max(300, container.clientWidth - 10);
}

function drawCharts(view, history) {
  const workerIds = Object.keys(history.worker_threads).sort();
  if (workerIds.join(",") !== view.workerIds) {
    if (view.charts.threads) view.charts.threads.destroy();
    view.charts.threads = null;
    view.workerIds = workerIds.join(",");
  }
  const backlogData = [
    history.t,
    history.visible_depth,
    history.in_flight,
    history.processed_per_s,
  ];
  const threadData = [
    history.t,
    history.threads,
    history.target_threads,
    ...workerIds.map((id) => history.worker_threads[id]),
  ];
  if (!view.charts.backlog) {
    view.charts.backlog = makeChart(view.backlog, [
      { label: "visible messages", stroke: COLORS[0], scale: "messages" },
      { label: "in flight", stroke: COLORS[1], scale: "messages" },
      { label: "processed/s", stroke: COLORS[2], scale: "rate" },
    ], backlogData, ["messages", "rate"]);
  } else {
    view.charts.backlog.setData(backlogData);
  }
  if (!view.charts.threads) {
    const series = [
      { label: "threads (all)", stroke: COLORS[0], width: 2, scale: "threads" },
      { label: "target", stroke: COLORS[4], dash: [6, 4], scale: "threads" },
      ...workerIds.map((id, i) => ({
        label: id,
        stroke: COLORS[(i + 2) % COLORS.length],
        scale: "threads",
      })),
    ];
    view.charts.threads = makeChart(view.threads, series, threadData, ["threads"]);
  } else {
    view.charts.threads.setData(threadData);
  }
}

function makeChart(container, series, data, scales) {
  const axes = [{}];
  scales.forEach((scale, i) => {
    axes.push({ scale, label: scale, side: i === 0 ? 3 : 1, grid: { show: i === 0 } });
  });
  const options = {
    width: chartWidth(container),
    height: 220,
    series: [{}, ...series.map((s) => ({ spanGaps: false, width: 1.5, ...s }))],
    scales: Object.fromEntries(scales.map((scale) => [scale, { range: (u, min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] }])),
    axes,
  };
  const chart = new uPlot(options, data, container);
  window.addEventListener("resize", () =>
    chart.setSize({ width: chartWidth(container), height: 220 }),
  );
  return chart;
}

refresh();
