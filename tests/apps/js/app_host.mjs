// A test MCP Apps host for Chromium (tests/apps/test_in_chromium.py), built from the extension's
// own SDK: the ext-apps host side (`AppBridge` over `PostMessageTransport`) and the TypeScript SDK
// client, bundled into one browser script by scripts/install-apps (esbuild).
//
// The page's query names the model's call: `?tool=<name>&arguments=<JSON>`. The page connects an
// MCP client to the same-origin `/mcp` (the test relays it to a visitor session of the host),
// lists the tools, reads the `ui://` app the tool names, makes the model's call, renders the app
// in `<iframe sandbox="allow-scripts">` (srcdoc: an opaque origin, no network of the page's), and
// gives the app the call's input and result over the bridge. The app's own `tools/call`s go
// through the client to the host, which gates them as any visitor call.
//
// What the test reads, in `window.appHost`:
//   {state: "connecting" | "rendered" | "failed", tool, uri, appInfo, modelCall, calls: [...],
//    error}
// each of `calls` one app-originated call: {name, arguments, result} or {name, arguments, error}.
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const HOST_INFO = { name: "mcp-host test app host", version: "1" };
const record = { state: "connecting", tool: null, uri: null, appInfo: null, modelCall: null, calls: [], error: null };
window.appHost = record;

function say(text) {
  document.getElementById("host-status").textContent = text;
}

async function connect() {
  const client = new Client({ name: "app-host-test-page", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", window.location.origin)));
  return client;
}

/** The app's HTML and its declared `_meta.ui` (csp, permissions), as the host serves them. */
async function readApp(client, uri) {
  const read = await client.readResource({ uri });
  const content = read.contents[0];
  const html = "text" in content ? content.text : new TextDecoder().decode(Uint8Array.from(atob(content.blob), (c) => c.charCodeAt(0)));
  return { html, declared: content._meta?.ui ?? {} };
}

/** An app-originated `tools/call`, forwarded through the visitor's client and recorded. */
function forwarding(client) {
  return async (params) => {
    const call = { name: params.name, arguments: params.arguments ?? {} };
    record.calls.push(call);
    try {
      call.result = await client.callTool({ name: params.name, arguments: params.arguments ?? {} });
      return call.result;
    } catch (error) {
      call.error = String(error?.message ?? error);
      throw error;
    }
  };
}

function frame(html) {
  const iframe = document.createElement("iframe");
  iframe.id = "app";
  iframe.setAttribute("sandbox", "allow-scripts"); // no allow-same-origin: the app's origin is opaque
  iframe.srcdoc = html;
  document.getElementById("apps").appendChild(iframe);
  return iframe;
}

async function render(client, tool, args) {
  const uri = getToolUiResourceUri(tool);
  if (!uri) throw new Error(`the tool ${tool.name} names no app`);
  record.uri = uri;
  const { html } = await readApp(client, uri);
  const modelCall = await client.callTool({ name: tool.name, arguments: args });
  record.modelCall = modelCall;

  const bridge = new AppBridge(null, HOST_INFO, { serverTools: {}, serverResources: {}, logging: {} }, {
    hostContext: { theme: "light", displayMode: "inline", platform: "web" },
  });
  bridge.oncalltool = forwarding(client);
  bridge.onreadresource = (params) => client.readResource(params);
  bridge.onlistresources = (params) => client.listResources(params);
  const iframe = frame(html);
  bridge.onsizechange = ({ height }) => {
    if (height) iframe.style.height = `${Math.ceil(height)}px`;
  };
  const initialized = new Promise((resolve) => {
    bridge.oninitialized = () => resolve();
  });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  await initialized;
  record.appInfo = bridge.getAppVersion() ?? null;
  await bridge.sendToolInput({ arguments: args });
  await bridge.sendToolResult(modelCall);
}

async function main() {
  const query = new URLSearchParams(window.location.search);
  const name = query.get("tool");
  const args = JSON.parse(query.get("arguments") || "{}");
  record.tool = name;
  say(`connecting for ${name}`);
  const client = await connect();
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === name);
  if (!tool) throw new Error(`the session lists no tool ${name}`);
  await render(client, tool, args);
  record.state = "rendered";
  say(`${name}: app ${record.uri} rendered`);
}

main().catch((error) => {
  record.state = "failed";
  record.error = String(error?.message ?? error);
  say(`failed: ${record.error}`);
});
