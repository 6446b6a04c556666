// A visitor through the official TypeScript SDK client (pinned in .cache/ecosystem), driven one
// line at a time by tests/cluster/support.py: connects (2025-11-25, initialize), then reads JSON
// commands on stdin and answers each with one JSON line on stdout:
//   {"call": name, "arguments": {...}} -> {"result": ..., "sessionId": ...} | {"error": {code, message}, "sessionId": ...}
//   {"reconnect": true}                -> {"reconnected": true, "sessionId": ...} (a new transport: initialize again)
// argv: <sdk package folder> <session mcp url>; the bearer token comes in the environment
// (MCP_VISITOR_TOKEN) so that it never shows on a command line.
import { createInterface } from "node:readline";
import { connectVisitor } from "../js/sdk_visitor.mjs";

const [sdk, url] = process.argv.slice(2);
const connect = () => connectVisitor(sdk, url, "cluster-proof");

let current = await connect();
const say = (answer) => process.stdout.write(JSON.stringify({ ...answer, sessionId: current.transport.sessionId ?? null }) + "\n");

for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  try {
    if (command.reconnect) {
      await current.client.close().catch(() => {});
      current = await connect();
      say({ reconnected: true });
    } else {
      say({ result: await current.client.callTool({ name: command.call, arguments: command.arguments ?? {} }) });
    }
  } catch (error) {
    say({ error: { code: error?.code ?? null, message: String(error?.message ?? error) } });
  }
}
await current.client.close().catch(() => {});
