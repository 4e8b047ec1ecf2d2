// A new thread's first tool call as a remote agent sees it (issue #28 item 3): for each of N
// threads, a Streamable HTTP session naming a new thread (X-Thread-ID) is opened (initialize,
// untimed), the server is left PAUSE_MS to refill its warm pool, and the first bash `true` is
// timed through the TypeScript SDK client; prints the p50 and p99 in microseconds.
//   KIT=... node cold.mjs URL N PAUSE_MS TAG
const kit = process.env.KIT;
const { Client } = await import(`${kit}/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${kit}/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js`);
const [url, nStr, pauseStr, tag] = process.argv.slice(2);
const n = +nStr || 10, pause = +pauseStr || 0;
const ts = [];
for (let i = 0; i < n; i++) {
  const t = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { "X-Thread-ID": `cold-${tag}-${process.pid}-${i}` } },
  });
  const c = new Client({ name: "coldbench", version: "1" });
  await c.connect(t);
  await new Promise(r => setTimeout(r, pause));
  const s = process.hrtime.bigint();
  const r = await c.callTool({ name: "bash", arguments: { command: "true" } });
  ts.push(Number(process.hrtime.bigint() - s) / 1e3);
  if (r.isError) { console.error("ERR", JSON.stringify(r).slice(0, 300)); process.exit(1); }
  await c.close();
}
ts.sort((x, y) => x - y);
console.log(JSON.stringify({ n, p50_us: ts[n >> 1] | 0, p99_us: ts[Math.floor(n * 0.99)] | 0 }));
