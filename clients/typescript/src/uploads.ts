// Uploading an attachment (docs/protocol.md, "Attachments"): the server
// makes the upload and its key, the client seals the file and PUTs it
// straight to the object store, whole on one URL or in parts each on its
// own URL, as the server's answer says (its method, not what was asked,
// decides). The store, not the client, keeps what has arrived: a GET of
// the upload lists the parts it still lacks, so an upload resumes with
// nothing but its id, after a failure or a restart of the app.
import type { Api } from "./api.js";
import { ChunkSize, fromBase64Url, partOf, seal, sealChunks } from "./attachments.js";
import { UploadError } from "./errors.js";
import type { Upload } from "./protocol.js";

/**
 * MultipartThreshold is the size from which Client.upload asks for an
 * upload in parts (multipart): each part is read, sealed and PUT on its
 * own, so a large file is never whole in memory (with a Blob), and an
 * upload that failed part way resumes from the parts the store lacks
 * rather than from the start. Below it, one PUT of the whole sealed file
 * costs fewer requests.
 */
export const MultipartThreshold = 8 * 1024 * 1024;

/**
 * UploadFile is a file to upload: its name, media type and bytes; sha256
 * (hex), width and height are optional and reach every member.
 */
export interface UploadFile {
  name: string;
  contentType: string;
  /**
   * data: the file's bytes. A Blob (a browser's File) is read a part at a
   * time (blob.slice), so a large file never has to be in memory whole;
   * a resume reads it again.
   */
  data: Uint8Array | Blob;
  sha256?: string;
  width?: number;
  height?: number;
  /**
   * onProgress, when set, is told how many sealed bytes have gone out of
   * total (the upload's sealed_size), at least after each PUT (the whole
   * file, or a part) and last with sent equal to total. A resume starts
   * from what the store holds already when the server's answer tells.
   */
  onProgress?: (sent: number, total: number) => void;
  /**
   * onCreated, when set, is told the upload as soon as the server made it,
   * before any byte goes: keep its id to resume the upload after a restart
   * (Client.resumeUpload).
   */
  onCreated?: (up: Upload) => void;
}

/** sizeOf is the size of a file's data. */
function sizeOf(data: Uint8Array | Blob): number {
  return ArrayBuffer.isView(data) ? data.length : data.size; // isView: a Uint8Array of another realm too
}

/** bytesOf reads the bytes start to end-1 of data (a view, not a copy, of a Uint8Array). */
async function bytesOf(data: Uint8Array | Blob, start: number, end: number): Promise<Uint8Array> {
  if (ArrayBuffer.isView(data)) return data.subarray(start, end);
  const b = new Uint8Array(await data.slice(start, end).arrayBuffer());
  if (b.length !== end - start) throw new Error(`the file gave ${b.length} bytes at ${start}, not ${end - start}`);
  return b;
}

/**
 * upload is Client.upload: an error before the server made the upload
 * is the ApiError of that request; one after is an UploadError.
 *
 * @internal
 */
export async function upload(api: Api, cid: number, file: UploadFile): Promise<Upload> {
  const size = sizeOf(file.data);
  if (size === 0) throw new Error("inboxd: an upload needs a non-empty file");
  const up = await api.createUpload(cid, {
    name: file.name, content_type: file.contentType, size, sha256: file.sha256, width: file.width, height: file.height,
    multipart: size >= MultipartThreshold ? true : undefined,
  });
  try {
    file.onCreated?.(up);
    return await finish(api, cid, up, file, size);
  } catch (err) {
    throw new UploadError(up.id, err);
  }
}

/**
 * resumeUpload is Client.resumeUpload.
 *
 * @internal
 */
export async function resumeUpload(api: Api, cid: number, id: string, file: UploadFile): Promise<Upload> {
  const up = await api.getUpload(cid, id);
  const size = sizeOf(file.data);
  if (size !== up.size) throw new Error(`inboxd: upload ${id} is of ${up.size} bytes, not ${size}`);
  try {
    return await finish(api, cid, up, file, size);
  } catch (err) {
    throw new UploadError(id, err);
  }
}

/**
 * finish sends what the store lacks of up, as the server described it,
 * and completes an upload in parts. Parts go one at a time: a part is
 * read and sealed in memory (part_size plus its tags), and one PUT at a
 * time already fills most uplinks.
 */
async function finish(api: Api, cid: number, up: Upload, file: UploadFile, size: number): Promise<Upload> {
  if (up.state === "uploaded" || up.state === "attached") return up;
  if (!up.key) throw new Error("the server's answer has no key");
  const key = fromBase64Url(up.key);
  const total = up.sealed_size;
  const report = (sent: number) => file.onProgress?.(sent, total);

  if (up.method !== "multipart") {
    if (!up.url) throw new Error(`the server's answer (method ${up.method}) has no url`);
    const body = await seal(await bytesOf(file.data, 0, size), key);
    await put(api, up.url, up.method, up.headers, body);
    report(total);
    return up;
  }

  if (!up.part_size) throw new Error("the server's answer (multipart) has no part_size");
  // What is in already: the sealed size less the parts listed, when they
  // are all that is missing (else unknown until later answers: 0).
  let listed = 0;
  for (const p of up.parts ?? []) listed += p.size;
  let sent = (up.parts_left ?? 0) === (up.parts?.length ?? 0) ? total - listed : 0;
  let cur = up;
  while (cur.parts && cur.parts.length > 0) {
    const partSize = cur.part_size ?? up.part_size;
    for (const p of cur.parts) {
      try {
        const rg = partOf(size, partSize, p.number);
        if (rg.length !== p.size) throw new Error(`the server says ${p.size} bytes, the file makes ${rg.length}`);
        const plain = await bytesOf(file.data, rg.first * ChunkSize, Math.min(size, (rg.first + rg.count) * ChunkSize));
        await put(api, p.url, "PUT", p.headers, await sealChunks(plain, size, rg.first, rg.count, key));
      } catch (err) {
        throw new Error(`part ${p.number}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      sent += p.size;
      report(sent);
    }
    if ((cur.parts_left ?? 0) <= cur.parts.length) break;
    // More parts missing than one answer lists: the next ones.
    cur = await api.getUpload(cid, up.id);
    if (cur.state !== "open") break;
  }
  const done = await api.completeUpload(cid, up.id);
  if (sent !== total) report(total);
  return done;
}

/** put sends body to the store on a presigned URL; a store's answer other than 2xx is an error. */
async function put(api: Api, url: string, method: string, headers: { [name: string]: string }, body: Uint8Array): Promise<void> {
  const res = await api.raw(url, { method, headers, body: body as BodyInit });
  await res.arrayBuffer().catch(() => undefined);
  if (!res.ok) throw new Error(`the store answered ${res.status}`);
}
