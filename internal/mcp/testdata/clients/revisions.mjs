// revisions.mjs drives airlock mcp with the TypeScript SDK's 2.x client
// (@modelcontextprotocol/client) for internal/mcp's TestTypeScriptClientRevisions.
//
// Usage: node revisions.mjs '<JSON options>', the options being
//   transport  "stdio" (spawn command with args) or "http" (url, with token as bearer)
//   pin        a revision to pin (versionNegotiation { pin }), or absent for mode "auto"
//   tool, toolArgs  a tool to call after listing, and its arguments
//   watch      wait, after the call, for the tool list to change
//
// It prints one JSON object per line on stdout: {"event":"connected","version":…},
// {"event":"tools","names":[…]}, {"event":"call","result":…}, then, with watch,
// {"event":"watching"} and {"event":"changed","names":[…]} once the client has been told
// that the list changed and listed it again. A failure is {"event":"error","message":…}
// and exit status 1.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const opts = JSON.parse(process.argv[2]);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const names = (tools) => tools.map((t) => t.name).sort();

let changed;
const changedOnce = new Promise((resolve) => { changed = resolve; });

try {
  const client = new Client({ name: 'airlock-revisions', version: '1.0.0' }, {
    versionNegotiation: { mode: opts.pin ? { pin: opts.pin } : 'auto' },
    listChanged: {
      tools: {
        debounceMs: 0,
        onChanged: (err, tools) => {
          if (err) { out({ event: 'error', message: String(err) }); process.exit(1); }
          changed(tools);
        },
      },
    },
  });
  const transport = opts.transport === 'stdio'
    ? new StdioClientTransport({ command: opts.command, args: opts.args, env: opts.env, stderr: 'inherit' })
    : new StreamableHTTPClientTransport(new URL(opts.url), { requestInit: { headers: { Authorization: `Bearer ${opts.token}` } } });
  await client.connect(transport);
  out({ event: 'connected', version: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra() });
  out({ event: 'tools', names: names((await client.listTools()).tools) });
  const result = await client.callTool({ name: opts.tool, arguments: opts.toolArgs ?? {} });
  out({ event: 'call', result });
  if (opts.watch) {
    out({ event: 'watching' });
    out({ event: 'changed', names: names(await changedOnce) });
  }
  await client.close();
  process.exit(0);
} catch (err) {
  out({ event: 'error', message: String(err?.stack ?? err) });
  process.exit(1);
}
