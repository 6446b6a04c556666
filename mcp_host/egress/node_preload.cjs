'use strict';
// The egress preload (mcp_host/egress/node_preload.cjs), loaded into every Node process of a
// sandbox with egress by NODE_OPTIONS=--require /run/mcp-host/egress-node.cjs.
//
// A sandbox with egress has no network but its loopback, where the egress bridge listens for the
// host's proxy (HTTPS_PROXY and friends name it). Node >= 24 and >= 22.21 send their built-in
// fetch through those variables themselves when NODE_USE_ENV_PROXY=1, which the sandbox sets;
// Node 20 does not, so this file makes it: it replaces fetch's global dispatcher (the undici
// bundled in Node, no npm package) by an Agent of the same class whose `connect` opens an HTTP
// CONNECT tunnel to the proxy, then TLS inside it for https. Only fetch: `http.request` and npm
// clients (axios, got, undici from npm) take their own proxy option. Without a proxy variable,
// with no fetch, or where Node honours the variables, it does nothing.

(function installEgressProxy() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major >= 24 || (major === 22 && minor >= 21) || major === 23) return;
  const env = process.env;
  const proxyText = env.HTTPS_PROXY || env.https_proxy || env.HTTP_PROXY || env.http_proxy || '';
  if (!proxyText || typeof globalThis.fetch !== 'function') return;
  let proxy;
  try {
    proxy = new URL(proxyText);
  } catch {
    return;
  }
  if (proxy.protocol !== 'http:') return;
  const key = Symbol.for('undici.globalDispatcher.1');
  // Node makes fetch's dispatcher at the first call; a data: URL makes it without any network.
  if (!globalThis[key]) globalThis.fetch('data:,').catch(() => {});
  const current = globalThis[key];
  if (!current || typeof current.constructor !== 'function') return;
  const net = require('node:net');
  const tls = require('node:tls');
  const proxyHost = proxy.hostname.replace(/^\[|\]$/g, '');
  const proxyPort = Number(proxy.port) || 80;
  const MAX_HEAD = 16 * 1024;

  function target(opts) {
    const https = opts.protocol === 'https:';
    const port = Number(opts.port) || (https ? 443 : 80);
    const host = String(opts.hostname).replace(/^\[|\]$/g, '');
    return { https, host, authority: net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}` };
  }

  function connect(opts, callback) {
    const { https, host, authority } = target(opts);
    const socket = net.connect({ host: proxyHost, port: proxyPort });
    let settled = false;
    const settle = (error, result) => {
      if (settled) return;
      settled = true;
      socket.removeListener('data', onData);
      if (error) {
        socket.destroy();
        callback(error, null);
      } else {
        callback(null, result);
      }
    };
    socket.once('error', (error) => settle(error));
    socket.once('connect', () => {
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    });
    let head = Buffer.alloc(0);
    function onData(chunk) {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > MAX_HEAD) settle(new Error('the egress proxy sent an oversized answer'));
        return;
      }
      socket.removeListener('data', onData);
      socket.pause();
      const statusLine = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      if (!/^HTTP\/1\.[01] 200\b/.test(statusLine)) {
        const body = head.subarray(end + 4).toString('utf8').trim().split('\n')[0];
        settle(new Error(`egress proxy refused ${authority}: ${statusLine}${body ? ` (${body})` : ''}`));
        return;
      }
      const rest = head.subarray(end + 4);
      if (rest.length) socket.unshift(rest);
      socket.removeAllListeners('error');
      if (!https) {
        settle(null, socket);
        return;
      }
      const servername = opts.servername || (net.isIP(host) ? undefined : host);
      // `host` is what the certificate is checked against (without it: 'localhost').
      const secure = tls.connect({ socket, host, servername, ALPNProtocols: ['http/1.1'] });
      secure.once('secureConnect', () => {
        secure.removeAllListeners('error');
        settle(null, secure);
      });
      secure.once('error', (error) => {
        secure.destroy();
        settle(error);
      });
    }
    socket.on('data', onData);
  }

  globalThis[key] = new current.constructor({ connect });
})();
