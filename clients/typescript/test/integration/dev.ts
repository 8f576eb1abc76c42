// Starts a real `inboxd dev` (built from this repository) on free ports for
// the integration tests, and stops it (SIGTERM) at the end, always. A Dev can
// be halted and started again on the same --data-dir and ports (a gateway
// restart, or `--no-fanout` for `inboxd replay`).
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../../../..");

export interface Dev {
  /** url is the gateway's base URL (it only changes if a restart had to move to other ports). */
  readonly url: string;
  /** bin is the built `inboxd` binary (for `inboxd replay` and the like). */
  readonly bin: string;
  /** databaseUrl and brokers are dev's embedded PostgreSQL and Kafka. */
  readonly databaseUrl: string;
  readonly brokers: string;
  /** stop ends the process (SIGTERM) and removes the data dir: the end of this Dev. */
  stop(): Promise<void>;
  /** halt ends the process (SIGTERM), keeping the data dir and ports for restart. */
  halt(): Promise<void>;
  /** restart halts dev if it runs, then starts it again on the same data dir and ports, with the start's args plus extra. */
  restart(extra?: string[]): Promise<void>;
  /** output is what the running (or last) process printed. */
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

/** buildInboxd builds the binary into dir once per call; go's build cache makes a second build quick. */
export function buildInboxd(dir: string): string {
  const bin = join(dir, "inboxd");
  execFileSync("go", ["build", "-o", bin, "./cmd/inboxd"], { cwd: repoRoot, stdio: "inherit" });
  return bin;
}

/** startDev builds the binary, starts dev and waits for /readyz 200 and the fanout's partitions. */
export async function startDev(extra: string[] = []): Promise<Dev> {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-dev-"));
  let bin: string;
  try {
    bin = buildInboxd(dir);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  let [pg, kafka, http] = await freePorts(3) as [number, number, number];
  let proc: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let out = "";

  const halt = async () => {
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      const p = proc;
      const t = setTimeout(() => p.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(t);
    }
    proc = undefined;
  };

  const launch = async (args: string[]) => {
    for (let attempt = 0; ; attempt++) {
      out = "";
      const p = spawn(bin, ["dev", "--data-dir", join(dir, "data"), "--http-addr", `127.0.0.1:${http}`,
        "--pg-port", String(pg), "--kafka-port", String(kafka), ...args],
        { env: { ...process.env, INBOXD_KAFKA_BROKERS: "", DATABASE_URL: "" }, stdio: ["ignore", "pipe", "pipe"] });
      proc = p;
      p.stdout.on("data", (b) => { out += b; });
      p.stderr.on("data", (b) => { out += b; });
      exited = new Promise<void>((ok) => p.once("exit", () => ok()));
      try {
        await waitReady(dev, p, !args.includes("--no-fanout"));
        return;
      } catch (err) {
        await halt();
        // A port picked free was taken since by another process: move to fresh ones (the data dir stays).
        if (attempt < 3 && /is taken|address already in use/i.test(out)) {
          [pg, kafka, http] = await freePorts(3) as [number, number, number];
          continue;
        }
        throw err;
      }
    }
  };

  const dev: Dev = {
    get url() { return `http://127.0.0.1:${http}`; },
    bin,
    get databaseUrl() { return `postgres://postgres@127.0.0.1:${pg}/inboxd?sslmode=disable`; },
    get brokers() { return `127.0.0.1:${kafka}`; },
    output: () => out,
    halt,
    restart: async (more: string[] = []) => {
      await halt();
      await launch([...extra, ...more]);
    },
    stop: async () => {
      await halt();
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await launch(extra);
  } catch (err) {
    await dev.stop();
    throw err;
  }
  return dev;
}

async function waitReady(dev: Dev, proc: ChildProcess, fanout: boolean): Promise<void> {
  const end = Date.now() + 120_000;
  while (Date.now() < end) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`inboxd dev exited: ${dev.output().slice(-2000)}`);
    const ok = await fetch(dev.url + "/readyz").then((r) => r.status === 200, () => false);
    if (ok && (!fanout || dev.output().includes("partitions assigned"))) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`inboxd dev not ready in 2 minutes: ${dev.output().slice(-2000)}`);
}

/** run runs the binary to its end and resolves with its output; a non-zero exit rejects. */
export function run(bin: string, args: string[], timeoutMs = 120_000): Promise<string> {
  return new Promise((ok, fail) => {
    const p = spawn(bin, args, { env: { ...process.env, INBOXD_KAFKA_BROKERS: "", DATABASE_URL: "" }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (b) => { out += b; });
    p.stderr.on("data", (b) => { out += b; });
    const t = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    p.once("exit", (code, sig) => {
      clearTimeout(t);
      if (code === 0) ok(out);
      else fail(new Error(`inboxd ${args[0]} exited ${code ?? sig}: ${out.slice(-2000)}`));
    });
  });
}
