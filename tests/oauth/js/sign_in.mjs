// A native MCP client signing in through the host's front desk with an official TypeScript
// SDK's client auth provider (`OAuthClientProvider` given to StreamableHTTPClientTransport as
// `authProvider`), for tests/oauth/test_typescript_sign_in.py. Like a desktop client it serves
// its redirect URI on loopback (http://127.0.0.1:<port>/callback) and opens the authorize URL
// with the program `$BROWSER` names (the test's headless browser, which fills the desk's form
// from the MCP_DESK_* variables and lands on the callback). Then it lists the tools, makes the
// calls given as JSON and prints one JSON document on stdout:
//   {protocolVersion, client: {client_id, token_endpoint_auth_method}, opened: [urls],
//    callback: {code?, state?, iss?, error?}, tools: [names], calls: [{result} | {error}],
//    hasRefreshToken}
// argv: <sdk> <door url> <calls JSON>. <sdk>: `v1:<folder of @modelcontextprotocol/sdk>` (1.x,
// which speaks 2025-11-25) or `v2-<mode>:<folder of @modelcontextprotocol/client>` (2.x, with
// `versionNegotiation.mode` legacy or auto; auto probes and speaks 2026-07-28 where offered).
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { listAndCall } from "../../js/list_and_call.mjs";

const [sdk, door, callsJson] = process.argv.slice(2);
const [generation, folder] = [sdk.slice(0, sdk.indexOf(":")), sdk.slice(sdk.indexOf(":") + 1)];
const load = (file) => import(pathToFileURL(join(folder, "dist", file)).href);
const { Client, StreamableHTTPClientTransport, UnauthorizedError, options } =
  generation === "v1"
    ? {
        ...(await load("esm/client/index.js")),
        ...(await load("esm/client/streamableHttp.js")),
        ...(await load("esm/client/auth.js")),
        options: { capabilities: {} },
      }
    : {
        ...(await load("index.mjs")),
        options: { capabilities: {}, versionNegotiation: { mode: generation.slice("v2-".length) } },
      };

// The redirect URI, served on loopback: the first request to /callback settles `landed`.
let land;
const landed = new Promise((resolve) => (land = resolve));
const callbacks = createServer((request, response) => {
  const url = new URL(request.url, "http://127.0.0.1");
  if (url.pathname !== "/callback") return response.writeHead(404).end();
  land(Object.fromEntries(url.searchParams));
  response.writeHead(200, { "content-type": "text/plain" }).end("signed in; you may close this window");
});
await new Promise((resolve) => callbacks.listen(0, "127.0.0.1", resolve));
const redirectUrl = `http://127.0.0.1:${callbacks.address().port}/callback`;

const opened = [];
const store = {};
const provider = {
  get redirectUrl() {
    return redirectUrl;
  },
  get clientMetadata() {
    return {
      client_name: "TypeScript SDK sign-in proof",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation: () => store.client,
  saveClientInformation: (client) => void (store.client = client),
  tokens: () => store.tokens,
  saveTokens: (tokens) => void (store.tokens = tokens),
  saveCodeVerifier: (verifier) => void (store.verifier = verifier),
  codeVerifier: () => store.verifier,
  saveDiscoveryState: (state) => void (store.discovery = state),
  discoveryState: () => store.discovery,
  redirectToAuthorization: (url) => {
    opened.push(url.href);
    const browser = spawn(process.env.BROWSER, [url.href], { stdio: ["ignore", "ignore", "inherit"] });
    browser.on("exit", (code) => code === 0 || land({ error: `the browser program exited ${code}` }));
  },
};

const client = new Client({ name: "oauth-proof", version: "1.0.0" }, options);
let transport = new StreamableHTTPClientTransport(new URL(door), { authProvider: provider });
let callback = {};
try {
  await client.connect(transport);
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
  callback = await Promise.race([
    landed,
    new Promise((resolve) => setTimeout(() => resolve({ error: "no callback within 60 s" }), 60_000)),
  ]);
  if (!callback.code) {
    process.stdout.write(JSON.stringify({ opened, callback }));
    process.exit(0);
  }
  // 2.x checks `iss` (RFC 9207) and the state when given the callback's parameters; 1.x takes the code.
  await transport.finishAuth(generation === "v1" ? callback.code : new URLSearchParams(callback));
  transport = new StreamableHTTPClientTransport(new URL(door), { authProvider: provider });
  await client.connect(transport);
}
callbacks.closeAllConnections();
callbacks.close();

const { tools, calls } = await listAndCall(client, callsJson);
const { client_id, token_endpoint_auth_method } = store.client ?? {};
process.stdout.write(
  JSON.stringify({
    protocolVersion: client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null,
    client: { client_id, token_endpoint_auth_method },
    opened,
    callback,
    tools,
    calls,
    hasRefreshToken: Boolean(store.tokens?.refresh_token),
  }),
);
await client.close();
process.exit(0); // the SDK's transport may keep a socket open
