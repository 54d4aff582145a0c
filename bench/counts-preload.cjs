/**
 * Per-reply counts of the service under `npm run bench -- --closed-loop` (Session 6):
 *   COUNTS_FILE=/tmp/counts.json NODE_OPTIONS="--require ./bench/counts-preload.cjs" npm run bench -- ...
 * Only the service process (src/main.ts, or dist/main.js as `npm start` runs it) counts; it writes its totals to COUNTS_FILE on exit:
 * SSE writes (`ServerResponse.write`), `content` and `done` events written, pg statements
 * (`Client.prototype.query`, the text's first words as kind). Replies = `done` events.
 */
'use strict';
if (
  process.argv.some((a) => a.endsWith('src/main.ts') || a.endsWith('dist/main.js')) &&
  process.env.COUNTS_FILE
) {
  const http = require('node:http');
  const fs = require('node:fs');
  const counts = { sseWrites: 0, contentEvents: 0, doneEvents: 0, statements: 0, kinds: {} };
  const write = http.ServerResponse.prototype.write;
  http.ServerResponse.prototype.write = function (chunk, ...rest) {
    if (typeof chunk === 'string' && chunk.startsWith('event: ')) {
      counts.sseWrites += 1;
      if (chunk.startsWith('event: content')) counts.contentEvents += 1;
      else if (chunk.startsWith('event: done')) counts.doneEvents += 1;
    }
    return write.call(this, chunk, ...rest);
  };
  const pg = require('pg');
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, ...rest) {
    counts.statements += 1;
    const text = typeof config === 'string' ? config : config?.text;
    const kind = typeof text === 'string' ? text.trim().replace(/\s+/g, ' ').slice(0, 40) : 'other';
    counts.kinds[kind] = (counts.kinds[kind] || 0) + 1;
    return query.call(this, config, ...rest);
  };
  // Event-loop utilization per second (what the coalescer's load signal sees), busy seconds only.
  const { performance } = require('node:perf_hooks');
  const elu = [];
  let last = performance.eventLoopUtilization();
  setInterval(() => {
    const now = performance.eventLoopUtilization();
    const u = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    if (u > 0.05) elu.push(+u.toFixed(2));
  }, 1000).unref();
  process.on('exit', () => {
    const r = counts.doneEvents || 1;
    const perReply = {
      replies: counts.doneEvents,
      eventLoopUtilization: elu,
      sseWritesPerReply: +(counts.sseWrites / r).toFixed(1),
      contentEventsPerReply: +(counts.contentEvents / r).toFixed(1),
      statementsPerReply: +(counts.statements / r).toFixed(2),
      kindsPerReply: Object.fromEntries(
        Object.entries(counts.kinds)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 15)
          .map(([k, v]) => [k, +(v / r).toFixed(3)]),
      ),
    };
    fs.writeFileSync(process.env.COUNTS_FILE, `${JSON.stringify(perReply, null, 1)}\n`);
  });
}
