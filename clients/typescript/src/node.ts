/**
 * `@inboxd/client/node`: the main entry's public API plus {@link FileStore}.
 * Browsers never import this module, so the main entry stays free of `node:`
 * imports.
 *
 * @module @inboxd/client/node
 */
import { open, rename, readFile, mkdir, unlink } from "node:fs/promises";
import { dirname, basename, join } from "node:path";
import { checkState, type State, type Store } from "./store.js";

export * from "./index.js";

/**
 * FileStore keeps the state in one JSON file, replaced atomically: written to
 * a temporary file, fsynced, renamed over the old one, then the directory is
 * fsynced. Mode 0600. A lock file (created exclusively, holding the pid)
 * stops a second FileStore on the same path in this or another process: two
 * writers would overwrite each other's cursor and outbox. A lock left by a
 * crashed process whose pid is gone is taken over.
 */
export class FileStore implements Store {
  private closed = false;

  private constructor(readonly path: string, private readonly lockPath: string) {}

  /** open takes the lock and returns the store; close releases it. */
  static async open(path: string): Promise<FileStore> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const lockPath = path + ".lock";
    await takeLock(lockPath);
    return new FileStore(path, lockPath);
  }

  async load(): Promise<State | undefined> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
    return checkState(JSON.parse(text));
  }

  async save(state: State): Promise<void> {
    if (this.closed) throw new Error("inboxd: FileStore is closed");
    const tmp = join(dirname(this.path), `.${basename(this.path)}.tmp`);
    const f = await open(tmp, "w", 0o600);
    try {
      await f.writeFile(JSON.stringify(state));
      await f.sync();
    } finally {
      await f.close();
    }
    await rename(tmp, this.path);
    await syncDir(dirname(this.path));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await unlink(this.lockPath).catch(() => undefined);
  }
}

async function takeLock(lockPath: string): Promise<void> {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const f = await open(lockPath, "wx", 0o600);
      await f.writeFile(String(process.pid));
      await f.close();
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = Number((await readFile(lockPath, "utf8").catch(() => "")).trim());
      if (holder > 0 && holder !== process.pid && alive(holder)) {
        throw new Error(`inboxd: ${lockPath} is held by process ${holder}`, { cause: err });
      }
      if (holder === process.pid) throw new Error(`inboxd: ${lockPath} is already open in this process`, { cause: err });
      await unlink(lockPath).catch(() => undefined); // stale: its process is gone
    }
  }
  throw new Error(`inboxd: could not lock ${lockPath}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function syncDir(dir: string): Promise<void> {
  try {
    const d = await open(dir, "r");
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // Some platforms (Windows) cannot fsync a directory; the rename is still atomic.
  }
}
