// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), for
// tests/apps/support.py: lists the session's tools (whole definitions) and resources, reads one
// resource, makes the calls given as JSON in order, and prints one JSON document on stdout:
//   {protocolVersion, serverCapabilities, tools, resources, read, calls}
// argv: <sdk package folder> <session mcp url> <uri to read> <calls JSON>; the bearer token comes
// in the environment (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { listAndCall } from "../../js/list_and_call.mjs";

const [sdk, url, uri, callsJson] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", file)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_VISITOR_TOKEN}` } },
});
const client = new Client({ name: "apps-proof", version: "1.0.0" }, { capabilities: {} });
await client.connect(transport);

const tools = (await client.listTools()).tools;
const resources = (await client.listResources()).resources;
const read = await client.readResource({ uri });
const { calls } = await listAndCall(client, callsJson);
process.stdout.write(
  JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    serverCapabilities: client.getServerCapabilities() ?? null,
    tools,
    resources,
    read,
    calls,
  }),
);
await client.close();
