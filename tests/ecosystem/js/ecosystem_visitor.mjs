// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), for
// tests/ecosystem/support.py: lists the session's tools, makes the calls given as JSON in
// order, and prints one JSON document on stdout:
//   {protocolVersion, tools: [names], calls: [{result} | {error: {code, message}}]}
// argv: <sdk package folder> <session mcp url> <calls JSON>; the bearer token comes in the
// environment (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { listAndCall } from "../../js/list_and_call.mjs";
import { connectVisitor } from "../../js/sdk_visitor.mjs";

const [sdk, url, callsJson] = process.argv.slice(2);
const { client, transport } = await connectVisitor(sdk, url, "ecosystem-proof");

const { tools, calls } = await listAndCall(client, callsJson);
process.stdout.write(JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, tools, calls }));
await client.close();
