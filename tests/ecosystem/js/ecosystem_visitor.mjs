// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), for
// tests/ecosystem/support.py: lists the session's tools, makes the calls given as JSON in
// order, and prints one JSON document on stdout:
//   {protocolVersion, tools: [names], calls: [{result} | {error: {code, message}}]}
// argv: <sdk package folder> <session mcp url> <calls JSON>; the bearer token comes in the
// environment (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { listAndCall } from "../../js/list_and_call.mjs";

const [sdk, url, callsJson] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", file)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_VISITOR_TOKEN}` } },
});
const client = new Client({ name: "ecosystem-proof", version: "1.0.0" }, { capabilities: {} });
await client.connect(transport);

const { tools, calls } = await listAndCall(client, callsJson);
process.stdout.write(JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, tools, calls }));
await client.close();
