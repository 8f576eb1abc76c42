// The long-poll fallback against a real `inboxd dev`: a proxy in front of it
// forwards HTTP but refuses every WebSocket upgrade (503, as a proxy that does
// not pass upgrades would); the client long-polls, then, once upgrades pass
// again and its polling period is over, goes back to the WebSocket.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import WebSocket from "ws";
import { Client, devToken, type Status, type WebSocketCtor } from "../../src/index.js";
import { startDev, type Dev } from "./dev.js";
import { Recorder, assertAscending, assertOnceInOrder, range, sendAll, settle, userApi, waitFor } from "./delivery.js";

let dev: Dev;
let proxy: UpgradeProxy;

before(async () => {
  dev = await startDev();
  proxy = await UpgradeProxy.start(new URL(dev.url));
}, { timeout: 300_000 });
after(async () => {
  await proxy?.close();
  await dev?.stop();
});

/** UpgradeProxy forwards every HTTP request to the target; WebSocket upgrades of /v1/ws get a 503 while refuse is set. */
class UpgradeProxy {
  refuse = true;
  refused = 0;
  upgraded = 0;
  private readonly sockets = new Set<Duplex>();

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(target: URL): Promise<UpgradeProxy> {
    const server = createServer();
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    const p = new UpgradeProxy(server, `http://127.0.0.1:${(server.address() as { port: number }).port}`);
    server.on("connection", (s) => p.track(s));
    server.on("request", (req, res) => {
      const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers, agent: false }, (ans) => {
        res.writeHead(ans.statusCode ?? 502, ans.rawHeaders);
        ans.pipe(res);
      });
      up.on("error", () => res.destroy());
      res.on("close", () => up.destroy());
      req.pipe(up);
    });
    server.on("upgrade", (req: IncomingMessage, sock: Duplex, head: Buffer) => {
      if (p.refuse && req.url?.startsWith("/v1/ws")) {
        p.refused++;
        sock.end("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nupgrades not allowed");
        return;
      }
      p.upgraded++;
      const up: Socket = connect(Number(target.port), target.hostname, () => {
        const lines = [`${req.method} ${req.url} HTTP/1.1`];
        for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
        up.write(lines.join("\r\n") + "\r\n\r\n");
        if (head.length > 0) up.write(head);
        up.pipe(sock);
        sock.pipe(up);
      });
      p.track(up);
      up.on("error", () => sock.destroy());
      sock.on("error", () => up.destroy());
      up.on("close", () => sock.destroy());
      sock.on("close", () => up.destroy());
    });
    return p;
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.on("close", () => this.sockets.delete(s));
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((ok) => this.server.close(ok));
  }
}

test("WebSocket upgrades refused (503) by a proxy: long-polling delivers once in order, then back to the WebSocket once upgrades pass", { timeout: 90_000 }, async () => {
  const alice = await userApi(dev.url, 1);
  const cid = await alice.createConversation("fallback", [2]);
  const rec = new Recorder(() => cid);
  const statuses: Status[] = [];
  let transport = "";
  const via: string[] = []; // the transport connected when each text message of cid was handed over
  const bob = await Client.create({
    baseUrl: proxy.url, token: await devToken(dev.url, 2), WebSocket: WebSocket as unknown as WebSocketCtor, transport: "auto",
    startupJitterMs: -1, backoffInitialMs: 50, backoffMaxMs: 200, breakerCooldownMs: 300,
    pollingPeriodMs: 1500, longPollWaitSec: 1,
    handlers: {
      onEntry: (e) => {
        const n = rec.got.length;
        rec.onEntry(e);
        if (rec.got.length > n) via.push(transport);
      },
      onStatus: (s) => {
        statuses.push(s);
        // A poll hands entries over before it reports connected: a connecting transport counts.
        if (s.state === "connected" || s.state === "connecting") transport = s.transport;
      },
    },
  });
  const running = bob.start();
  try {
    await waitFor(() => statuses.some((s) => s.state === "connected" && s.transport === "polling"), 30_000, "the client long-polling");
    assert.ok(proxy.refused >= 1, "the WebSocket was tried first");
    assert.equal(proxy.upgraded, 0);
    await sendAll(alice, cid, range("f", 1, 5));
    await waitFor(() => rec.got.length >= 5, 30_000, "5 messages by long-poll");

    proxy.refuse = false;
    const n = statuses.length;
    await waitFor(() => statuses.slice(n).some((s) => s.state === "connected" && s.transport === "websocket"), 30_000, "the client back on the WebSocket");
    assert.ok(proxy.upgraded >= 1);
    await sendAll(alice, cid, range("f", 6, 10));
    await waitFor(() => rec.got.length >= 10, 30_000, "5 messages over the WebSocket");
    await settle();
  } finally {
    await bob.stop();
    await running;
  }
  assertOnceInOrder(rec.got, range("f", 1, 10));
  assertAscending(rec.inboxSeqs(), "inbox_seq of every entry");
  assert.deepEqual(via.slice(0, 5), Array(5).fill("polling"), `transports: ${via.join(",")}`);
  assert.deepEqual(via.slice(5), Array(5).fill("websocket"), `transports: ${via.join(",")}`);
  const connected = statuses.filter((s) => s.state === "connected").map((s) => (s as { transport: string }).transport);
  assert.equal(connected[0], "polling", `the first connection long-polls: ${connected.join(",")}`);
  assert.ok(connected.includes("websocket"));
});
