"use strict";
// scaler_ui's page: polls /api/state once a second (the scheduler publishes about that often) and redraws.

const MIN_WINDOW_SECONDS = 60; // the charts span the history they have, between one and five minutes
const MAX_WINDOW_SECONDS = 300;
const POLL_MILLISECONDS = 1000;
const MAX_SAMPLES = 600;

const page = { columns: [], itlHeader: "ITL", actorHeaders: [], sortKey: "c", sequence: 0, samples: [], status: null };

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text; // never innerHTML: names come from clients and workers
  if (className) node.className = className;
  return node;
}

async function start() {
  const response = await fetch("/api/columns");
  const columns = await response.json();
  page.columns = columns.columns;
  page.itlHeader = columns.itl_header;
  page.sortKey = columns.default_sort;
  page.actorHeaders = columns.actor_headers;
  document.getElementById("shortcuts").textContent =
    "sort: click a column, or press " + page.columns.map((column) => `${column.header}[${column.key}]`).join(" ");
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (page.columns.some((column) => column.key === event.key)) sortBy(event.key);
  });
  window.addEventListener("resize", renderCharts);
  poll();
}

async function poll() {
  try {
    const response = await fetch(`/api/state?since=${page.sequence}`, { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    update(await response.json());
  } catch (error) {
    showConnection(false, `scaler_ui itself is not answering (${error.message}); retrying`);
  }
  setTimeout(poll, POLL_MILLISECONDS);
}

function update(state) {
  if (state.sequence < page.sequence) {
    page.samples = []; // scaler_ui was restarted: its numbering starts again
    page.sequence = 0;
    return;
  }
  page.sequence = state.sequence;
  page.samples.push(...state.samples);
  page.samples.splice(0, Math.max(0, page.samples.length - MAX_SAMPLES));
  document.getElementById("address").textContent = state.address;
  showConnection(state.live, state.message);
  page.status = state.status;
  if (page.status) {
    // colours go to workers on first sight: in name order, the legend's colours run in palette order
    page.status.workers.map((worker) => worker.name).sort().forEach((name) => Charts.colorFor(name));
    document.getElementById("completed").textContent = page.status.completed_tasks.toLocaleString("en-US");
    document.getElementById("rate").textContent = page.status.tasks_per_second;
    document.getElementById("worker-count").textContent = String(page.status.workers.length);
    renderSections();
    renderWorkers();
    renderActors();
  }
  renderCharts();
}

function showConnection(live, message) {
  const badge = document.getElementById("connection");
  badge.textContent = live ? "live" : "no status";
  badge.className = "badge " + (live ? "live" : "dead");
  const banner = document.getElementById("message");
  banner.hidden = !message;
  banner.textContent = message || "";
}

function renderSections() {
  const container = document.getElementById("sections");
  container.replaceChildren();
  for (const section of page.status.sections) {
    const table = element("table");
    table.id = `section-${section.title}`;
    table.append(element("caption", section.title));
    for (const [label, value] of section.rows) {
      const row = element("tr");
      row.append(element("td", label), element("td", value, "number"));
      table.append(row);
    }
    container.append(table);
  }
}

function sortBy(key) {
  page.sortKey = key;
  if (page.status) renderWorkers();
}

function sortedWorkers() {
  const byName = [...page.status.workers].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  if (page.sortKey === "n") return byName;
  return byName.sort((a, b) => b.values[page.sortKey] - a.values[page.sortKey]); // stable: ties stay by name
}

function workerRates(name) {
  return page.samples.slice(-60).map((sample) => {
    const worker = sample.workers[name];
    return worker ? worker.tasks_per_second : null;
  });
}

function renderWorkers() {
  const head = document.querySelector("#worker-table thead tr");
  head.replaceChildren();
  for (const column of page.columns) {
    const marked = column.key === page.sortKey ? "*" : "";
    const cell = element("th", marked + column.header, column.key === "n" ? "" : "number");
    cell.dataset.key = column.key;
    cell.title = `sort by ${column.header} (key ${column.key})`;
    cell.addEventListener("click", () => sortBy(column.key));
    head.append(cell);
  }
  for (const header of [page.itlHeader, "processed", "tasks/s"]) head.append(element("th", header, "static number"));
  head.append(element("th", "task stream, last minute", "static"));
  const body = document.querySelector("#worker-table tbody");
  body.replaceChildren();
  for (const worker of sortedWorkers()) {
    const row = element("tr");
    row.dataset.worker = worker.name;
    for (const column of page.columns) {
      const cell = element("td", worker.text[column.key], column.key === "n" ? "name" : "number");
      cell.dataset.key = column.key;
      if (column.key === "n" && worker.state) cell.append(element("span", ` ${worker.state}`, "state"));
      row.append(cell);
    }
    row.append(element("td", worker.itl, "number"));
    const processed = element("td", worker.processed.toLocaleString("en-US"), "number processed");
    row.append(processed, element("td", worker.tasks_per_second, "number"));
    const stream = element("td");
    const canvas = element("canvas");
    stream.append(canvas);
    row.append(stream);
    body.append(row);
    Charts.sparkline(canvas, workerRates(worker.name), Charts.colorFor(worker.name));
  }
}

// one row per live actor, in the order the feed gives (by class, then worker); the section shows only when there are any
function renderActors() {
  const actors = page.status.actors;
  document.getElementById("actors").hidden = actors.length === 0;
  document.getElementById("actors-total").textContent = page.status.actors_total;
  const textColumns = new Set(["actor", "id", "worker"]);
  const head = document.querySelector("#actor-table thead tr");
  head.replaceChildren(...page.actorHeaders.map((header) => element("th", header, textColumns.has(header) ? "" : "number")));
  const body = document.querySelector("#actor-table tbody");
  body.replaceChildren();
  for (const cells of actors) {
    const row = element("tr");
    row.dataset.actor = cells[page.actorHeaders.indexOf("id")];
    page.actorHeaders.forEach((header, index) => {
      const cell = element("td", cells[index], textColumns.has(header) ? "name" : "number");
      cell.dataset.column = header;
      row.append(cell);
    });
    body.append(row);
  }
}

function renderCharts() {
  const end = page.samples.length ? page.samples[page.samples.length - 1].time : Date.now() / 1000;
  const span = page.samples.length ? end - page.samples[0].time : 0;
  const start = end - Math.min(MAX_WINDOW_SECONDS, Math.max(MIN_WINDOW_SECONDS, span));
  const total = page.samples.map((sample) => [sample.time, sample.tasks_per_second]);
  Charts.lineChart(document.getElementById("rate-chart"), [{ label: "all", color: "#5fb3f9", points: total, fill: true }], start, end);

  const names = page.status ? page.status.workers.map((worker) => worker.name).sort() : [];
  const series = names.map((name) => ({
    label: name,
    color: Charts.colorFor(name),
    points: page.samples.map((sample) => [sample.time, sample.workers[name] ? sample.workers[name].tasks_per_second : null]),
  }));
  Charts.lineChart(document.getElementById("worker-chart"), series, start, end);
  const legend = document.getElementById("worker-legend");
  legend.replaceChildren();
  for (const line of series) {
    const item = element("span", line.label);
    const swatch = element("i");
    swatch.style.background = line.color;
    item.prepend(swatch);
    legend.append(item);
  }
}

start();
