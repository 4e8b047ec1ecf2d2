// N concurrent sessions over Streamable HTTP, each its own TypeScript SDK client, each making M
// calls back to back once all are open (issue #28 item 4); prints calls per second over the timed
// part, and the p50 and p99 of every call, in microseconds.
//   KIT=... node load.mjs URL TOOL N M
// TOOL read_file: each session first writes small.txt (1 KiB) and reads it; noop: the peer's tool.
const kit = process.env.KIT;
const { Client } = await import(`${kit}/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${kit}/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js`);
const [url, tool, nStr, mStr] = process.argv.slice(2);
const n = +nStr || 100, m = +mStr || 100;
const line = "0123456789abcdef0123456789abcdef0123456789abcdef\n";
const args = tool === "read_file" ? { path: "small.txt" } : {};
const clients = [];
for (let i = 0; i < n; i++) {
  const c = new Client({ name: "loadbench", version: "1" });
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  if (tool === "read_file") {
    const w = await c.callTool({ name: "write_file", arguments: { path: "small.txt", content: line.repeat(21).slice(0, 1024) } });
    if (w.isError) { console.error("ERR", JSON.stringify(w).slice(0, 300)); process.exit(1); }
  }
  const r = await c.callTool({ name: tool, arguments: args });
  if (r.isError) { console.error("ERR", JSON.stringify(r).slice(0, 300)); process.exit(1); }
  clients.push(c);
}
const lat = [];
const t0 = process.hrtime.bigint();
await Promise.all(clients.map(async c => {
  for (let j = 0; j < m; j++) {
    const s = process.hrtime.bigint();
    const r = await c.callTool({ name: tool, arguments: args });
    lat.push(Number(process.hrtime.bigint() - s) / 1e3);
    if (r.isError) throw new Error(JSON.stringify(r).slice(0, 300));
  }
}));
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
lat.sort((x, y) => x - y);
console.log(JSON.stringify({ sessions: n, calls: m, calls_per_s: Math.round(n * m / wall), p50_us: lat[lat.length >> 1] | 0, p99_us: lat[Math.floor(lat.length * 0.99)] | 0 }));
await Promise.all(clients.map(c => c.close()));
