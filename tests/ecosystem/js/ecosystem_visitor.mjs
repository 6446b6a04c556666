// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), for
// tests/ecosystem/support.py: lists the session's tools, makes the calls given as JSON in
// order, and prints one JSON document on stdout:
//   {protocolVersion, tools: [names], calls: [{result} | {error: {code, message}}]}
// argv: <sdk package folder> <session mcp url> <calls JSON>; the bearer token comes in the
// environment (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdk, url, callsJson] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", file)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_VISITOR_TOKEN}` } },
});
const client = new Client({ name: "ecosystem-proof", version: "1.0.0" }, { capabilities: {} });
await client.connect(transport);

const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((tool) => tool.name));
  cursor = page.nextCursor;
} while (cursor);

const calls = [];
for (const call of JSON.parse(callsJson)) {
  try {
    calls.push({ result: await client.callTool({ name: call.name, arguments: call.arguments ?? {} }) });
  } catch (error) {
    calls.push({ error: { code: error?.code ?? null, message: String(error?.message ?? error) } });
  }
}
process.stdout.write(JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, tools, calls }));
await client.close();
