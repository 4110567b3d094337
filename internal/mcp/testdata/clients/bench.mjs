// bench.mjs is make bench-mcp-ts: the TypeScript SDK's client (@modelcontextprotocol/sdk,
// the 1.x line most Node.js agents embed) calls two MCP servers on stdio, row by row, the two
// alternating, for internal/mcp's BenchmarkMCPFilesystemTS.
//
// Usage: node bench.mjs '<JSON options>', the options being
//   servers  {air: {command, args}, ref: {command, args}}
//   rows     [{name, air, ref, conc}]: air and ref are each a call ({name, arguments}) or a
//            list of calls made in turn (an edit and the edit that undoes it); conc, when set,
//            replaces the options' conc for the row. "{seq}" in a string argument becomes
//            the call's number: writes made at once differ, as an agent's do (airlock takes
//            identical writes in flight together for retries of one write)
//   calls    measured calls per server, row and concurrency
//   warmup   calls per server before a row is measured
//   conc     the concurrencies, e.g. [1, 16]
//
// Both clients list the tools first, as an agent does, so that the client checks each
// structuredContent against its tool's outputSchema. At 1 call, the servers' calls alternate
// one by one; at more, in rounds of 10 calls per concurrent caller, each server first in every
// other round. It prints one JSON object per line on stdout: {"event":"row","row":…,"conc":…,
// "air":{p50,p99,perSec},"ref":{…}} (microseconds, calls per second), then {"event":"done"}.
// A failure is {"event":"error","message":…} and exit status 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const opts = JSON.parse(process.argv[2]);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

async function connect(server) {
  const client = new Client({ name: 'airlock-bench-ts', version: '1.0.0' }, { capabilities: {} });
  await client.connect(new StdioClientTransport({ command: server.command, args: server.args, stderr: 'inherit' }));
  await client.listTools();
  return client;
}

// cycle returns a function that gives a row's calls in turn: a call, or each of a list.
function cycle(calls) {
  const list = Array.isArray(calls) ? calls : [calls];
  let turn = 0;
  return () => list[turn++ % list.length];
}

let seq = 0;

async function timeCall(client, params) {
  seq++;
  const args = Object.fromEntries(Object.entries(params.arguments).map(([k, v]) =>
    [k, typeof v === 'string' ? v.replaceAll('{seq}', String(seq)) : v]));
  const start = process.hrtime.bigint();
  const r = await client.callTool({ name: params.name, arguments: args });
  const took = Number(process.hrtime.bigint() - start) / 1000;
  if (r.isError) {
    throw new Error(`${params.name}: ${JSON.stringify(r.content).slice(0, 300)}`);
  }
  return took;
}

// concurrently makes n calls from conc callers and returns their latencies and wall time.
async function concurrently(client, next, conc, n) {
  const lat = [];
  let made = 0;
  const start = process.hrtime.bigint();
  const caller = async () => {
    while (made < n) {
      made++;
      lat.push(await timeCall(client, next()));
    }
  };
  await Promise.all(Array.from({ length: conc }, caller));
  return { lat, wall: Number(process.hrtime.bigint() - start) / 1000 };
}

function stats(lat, wallUS) {
  const s = [...lat].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  return { p50: at(0.5), p99: at(0.99), perSec: lat.length / (wallUS / 1e6) };
}

try {
  const air = await connect(opts.servers.air);
  const ref = await connect(opts.servers.ref);
  for (const row of opts.rows) {
    for (const conc of row.conc ?? opts.conc) {
      const sides = { air: { client: air, next: cycle(row.air), lat: [], wall: 0 }, ref: { client: ref, next: cycle(row.ref), lat: [], wall: 0 } };
      for (let i = 0; i < opts.warmup; i++) {
        await timeCall(air, sides.air.next());
        await timeCall(ref, sides.ref.next());
      }
      if (conc === 1) {
        for (let i = 0; i < opts.calls; i++) {
          for (const s of [sides.air, sides.ref]) {
            const t = await timeCall(s.client, s.next());
            s.lat.push(t);
            s.wall += t;
          }
        }
      } else {
        const round = 10 * conc;
        for (let i = 0; i * round < opts.calls; i++) {
          const k = Math.min(round, opts.calls - i * round);
          for (const s of i % 2 === 0 ? [sides.air, sides.ref] : [sides.ref, sides.air]) {
            const r = await concurrently(s.client, s.next, conc, k);
            s.lat.push(...r.lat);
            s.wall += r.wall;
          }
        }
      }
      out({ event: 'row', row: row.name, conc, air: stats(sides.air.lat, sides.air.wall), ref: stats(sides.ref.lat, sides.ref.wall) });
    }
  }
  await air.close();
  await ref.close();
  out({ event: 'done' });
  process.exit(0);
} catch (err) {
  out({ event: 'error', message: String(err?.stack ?? err) });
  process.exit(1);
}
