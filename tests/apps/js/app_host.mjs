// A test MCP Apps host for Chromium (tests/apps/test_in_chromium.py), built from the extension's
// own SDK: the ext-apps host side (`AppBridge` over `PostMessageTransport`) and the TypeScript SDK
// client, bundled into one browser script by scripts/install-apps (esbuild).
//
// The page's query names the model's call: `?tool=<name>&arguments=<JSON>`. The page connects an
// MCP client to the same-origin `/mcp` (the test relays it to a visitor session of the host),
// lists the tools, reads the `ui://` app the tool names, makes the model's call, renders the app
// in `<iframe sandbox="allow-scripts">` (srcdoc: an opaque origin) under a Content-Security-Policy
// made of the app's declared `_meta.ui.csp` alone, and gives the app the call's input and result
// over the bridge. The app's own `tools/call`s go
// through the client to the host, which gates them as any visitor call.
//
// What the test reads, in `window.appHost`:
//   {state: "connecting" | "rendered" | "failed", tool, uri, csp (the policy the app runs under),
//    appInfo, modelCall, calls: [...], error}
// each of `calls` one app-originated call: {name, arguments, result} or {name, arguments, error}.
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const HOST_INFO = { name: "mcp-host test app host", version: "1" };
const record = { state: "connecting", tool: null, uri: null, csp: null, appInfo: null, modelCall: null, calls: [], error: null };
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

/** The Content-Security-Policy an app runs under: what its declared `_meta.ui.csp` allows and
 * nothing more (no domain declared: no network at all), as the MCP Apps spec asks of hosts. */
function policy(csp = {}) {
  const words = (list) => (list ?? []).filter((d) => /^[a-z0-9*.:/-]+$/i.test(d)).join(" ");
  const resources = words(csp.resourceDomains);
  return [
    "default-src 'none'",
    `script-src 'unsafe-inline' ${resources}`,
    `style-src 'unsafe-inline' ${resources}`,
    `img-src data: blob: ${resources}`,
    `font-src data: ${resources}`,
    `media-src data: blob: ${resources}`,
    `connect-src ${words(csp.connectDomains) || "'none'"}`,
    `frame-src ${words(csp.frameDomains) || "'none'"}`,
    `base-uri ${words(csp.baseUriDomains) || "'none'"}`,
  ].join("; ");
}

/** `html` with `policy` as its first element, so that it covers everything the app loads. */
function underPolicy(html, policy) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${policy.replaceAll('"', "&quot;")}">`;
  const head = html.match(/<head[^>]*>/i);
  return head ? html.replace(head[0], head[0] + meta) : meta + html;
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
  const { html, declared } = await readApp(client, uri);
  record.csp = policy(declared.csp);
  const modelCall = await client.callTool({ name: tool.name, arguments: args });
  record.modelCall = modelCall;

  const bridge = new AppBridge(null, HOST_INFO, { serverTools: {}, serverResources: {}, logging: {} }, {
    hostContext: { theme: "light", displayMode: "inline", platform: "web", toolInfo: { tool } },
  });
  bridge.oncalltool = forwarding(client);
  bridge.onreadresource = (params) => client.readResource(params);
  bridge.onlistresources = (params) => client.listResources(params);
  const iframe = frame(underPolicy(html, record.csp));
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
