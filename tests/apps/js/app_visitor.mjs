// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), for
// tests/apps/support.py: lists the session's tools (whole definitions) and resources, reads one
// resource, makes the calls given as JSON in order, and prints one JSON document on stdout:
//   {protocolVersion, serverCapabilities, tools, resources, read, calls}
// argv: <sdk package folder> <session mcp url> <uri to read> <calls JSON>; the bearer token comes
// in the environment (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { listAndCall } from "../../js/list_and_call.mjs";
import { connectVisitor } from "../../js/sdk_visitor.mjs";

const [sdk, url, uri, callsJson] = process.argv.slice(2);
const { client, transport } = await connectVisitor(sdk, url, "apps-proof");

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
