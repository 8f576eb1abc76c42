// Starts a real `inboxd dev` (built from this repository) on free ports for
// the integration tests, and stops it (SIGTERM) at the end, always.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../../../..");

export interface Dev {
  url: string;
  stop(): Promise<void>;
  output(): string;
}

async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => ok(s));
  })));
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((ok) => s.close(ok))));
  return ports;
}

/** startDev builds the binary, starts dev and waits for /readyz 200 and the fanout's partitions. */
export async function startDev(extra: string[] = []): Promise<Dev> {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-dev-"));
  const bin = join(dir, "inboxd");
  execFileSync("go", ["build", "-o", bin, "./cmd/inboxd"], { cwd: repoRoot, stdio: "inherit" });
  const [pg, kafka, http] = await freePorts(3);
  const addr = `127.0.0.1:${http}`;
  const proc: ChildProcess = spawn(bin, ["dev", "--data-dir", join(dir, "data"), "--http-addr", addr,
    "--pg-port", String(pg), "--kafka-port", String(kafka), ...extra],
    { env: { ...process.env, INBOXD_KAFKA_BROKERS: "", DATABASE_URL: "" }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout!.on("data", (b) => { out += b; });
  proc.stderr!.on("data", (b) => { out += b; });
  const exited = new Promise<void>((ok) => proc.once("exit", () => ok()));
  const dev: Dev = {
    url: `http://${addr}`,
    output: () => out,
    stop: async () => {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 30_000);
        await exited;
        clearTimeout(t);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await waitReady(dev, proc);
  } catch (err) {
    await dev.stop();
    throw err;
  }
  return dev;
}

async function waitReady(dev: Dev, proc: ChildProcess): Promise<void> {
  const end = Date.now() + 120_000;
  while (Date.now() < end) {
    if (proc.exitCode !== null) throw new Error(`inboxd dev exited: ${dev.output().slice(-2000)}`);
    const ok = await fetch(dev.url + "/readyz").then((r) => r.status === 200, () => false);
    if (ok && dev.output().includes("partitions assigned")) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`inboxd dev not ready in 2 minutes: ${dev.output().slice(-2000)}`);
}
