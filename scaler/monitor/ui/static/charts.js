"use strict";
// Line charts drawn by hand on a canvas: the page loads nothing from the network, so it works offline.

const Charts = (() => {
  const GRID = "#2e3440";
  const LABEL = "#8a93a3";

  // Size the canvas backing store to its CSS box times the pixel ratio, so lines stay sharp on any screen.
  function prepare(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const context = canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    return { context, width, height };
  }

  // A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` grid lines up to `max`.
  function niceStep(max, ticks) {
    const raw = max / ticks;
    const magnitude = 10 ** Math.floor(Math.log10(raw));
    for (const multiple of [1, 2, 2.5, 5, 10]) {
      if (raw <= multiple * magnitude) return multiple * magnitude;
    }
    return 10 * magnitude;
  }

  function formatNumber(value) {
    if (value >= 1000) return Math.round(value).toLocaleString("en-US");
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  function clock(seconds) {
    return new Date(seconds * 1000).toTimeString().slice(0, 8);
  }

  // series: [{label, color, points: [[time in seconds, value or null], ...], fill}], drawn over [start, end].
  function lineChart(canvas, series, start, end) {
    const { context, width, height } = prepare(canvas);
    const left = 58, right = 12, top = 8, bottom = 22;
    const plotWidth = width - left - right;
    const plotHeight = height - top - bottom;
    let max = 0;
    let any = false;
    for (const line of series) {
      for (const [time, value] of line.points) {
        if (value === null || time < start) continue;
        any = true;
        max = Math.max(max, value);
      }
    }
    const step = niceStep(max > 0 ? max : 1, 4);
    const top_value = Math.max(step, Math.ceil(max / step) * step);
    const x = (time) => left + ((time - start) / (end - start)) * plotWidth;
    const y = (value) => top + plotHeight - (value / top_value) * plotHeight;

    context.font = "11px 'DejaVu Sans', sans-serif";
    context.lineWidth = 1;
    context.strokeStyle = GRID;
    context.fillStyle = LABEL;
    context.textAlign = "right";
    context.textBaseline = "middle";
    for (let value = 0; value <= top_value + step / 2; value += step) {
      context.beginPath();
      context.moveTo(left, Math.round(y(value)) + 0.5);
      context.lineTo(left + plotWidth, Math.round(y(value)) + 0.5);
      context.stroke();
      context.fillText(formatNumber(value), left - 6, y(value));
    }
    context.textAlign = "center";
    context.textBaseline = "top";
    for (let tick = 0; tick <= 4; tick++) {
      const time = start + ((end - start) * tick) / 4;
      context.fillText(clock(time), Math.min(Math.max(x(time), left + 24), left + plotWidth - 24), top + plotHeight + 6);
    }
    if (!any) {
      context.textBaseline = "middle";
      context.fillText("waiting for data", left + plotWidth / 2, top + plotHeight / 2);
      return;
    }
    for (const line of series) {
      const visible = line.points.filter(([time, value]) => value !== null && time >= start);
      if (visible.length === 0) continue;
      context.beginPath();
      visible.forEach(([time, value], index) => (index ? context.lineTo(x(time), y(value)) : context.moveTo(x(time), y(value))));
      context.strokeStyle = line.color;
      context.lineWidth = 1.8;
      context.stroke();
      if (line.fill) {
        context.lineTo(x(visible[visible.length - 1][0]), y(0));
        context.lineTo(x(visible[0][0]), y(0));
        context.closePath();
        context.globalAlpha = 0.18;
        context.fillStyle = line.color;
        context.fill();
        context.globalAlpha = 1;
      }
    }
  }

  // A worker's recent rate in a table cell, scaled to its own peak.
  function sparkline(canvas, values, color) {
    const { context, width, height } = prepare(canvas);
    const known = values.filter((value) => value !== null);
    const peak = Math.max(1, ...known);
    context.strokeStyle = GRID;
    context.beginPath();
    context.moveTo(0, height - 0.5);
    context.lineTo(width, height - 0.5);
    context.stroke();
    if (known.length < 2) return;
    context.beginPath();
    values.forEach((value, index) => {
      const px = (index / (values.length - 1)) * (width - 2) + 1;
      const py = height - 2 - ((value || 0) / peak) * (height - 4);
      index ? context.lineTo(px, py) : context.moveTo(px, py);
    });
    context.strokeStyle = color;
    context.lineWidth = 1.5;
    context.stroke();
  }

  // Distinct colours, handed out in the order workers are first seen, so a worker keeps its colour while the page
  // lives; past the palette, a hue derived from the name.
  const PALETTE = ["#5fb3f9", "#f2a65a", "#7ccf8a", "#e36d9c", "#b48ef2", "#f2d45a", "#5fd4d0", "#f26d6d", "#a3be8c", "#d08770"];
  const assigned = new Map();
  function colorFor(name) {
    if (!assigned.has(name)) {
      let hash = 0;
      for (const character of name) hash = (hash * 31 + character.codePointAt(0)) >>> 0;
      assigned.set(name, assigned.size < PALETTE.length ? PALETTE[assigned.size] : `hsl(${hash % 360}, 65%, 62%)`);
    }
    return assigned.get(name);
  }

  return { lineChart, sparkline, colorFor };
})();
