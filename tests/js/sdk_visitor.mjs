// How every Node visitor script in the tests connects: the official TypeScript SDK client from
// the package folder `sdk` (pinned in .cache/ecosystem), over streamable HTTP to a session's
// `url`, with the bearer token from the environment (MCP_VISITOR_TOKEN), so that it never shows
// on a command line. Returns {client, transport}, connected (initialize done).
import { pathToFileURL } from "node:url";
import { join } from "node:path";

export async function connectVisitor(sdk, url, name) {
  const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", file)).href);
  const { Client } = await load("client/index.js");
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_VISITOR_TOKEN}` } },
  });
  const client = new Client({ name, version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}
