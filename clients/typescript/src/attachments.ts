// Attachments (docs/protocol.md, "Attachments"): files sealed by the
// client with a key the gateway makes, uploaded straight to the object
// store on a presigned URL, downloaded from another and opened with the
// key the message carries. The sealed form is the Go package
// protocol/sealed's: 64 KiB chunks, each AES-256-GCM with the chunk's
// index as nonce and a last-chunk flag as additional data. WebCrypto only,
// so it runs in browsers and Node alike.

/** ChunkSize is the plaintext size of every sealed chunk but the last. */
export const ChunkSize = 64 * 1024;
/** Overhead is what sealing adds to each chunk (the GCM tag). */
export const Overhead = 16;

/** chunks is the number of chunks of a file of size bytes (at least one). */
export function chunks(size: number): number {
  return size <= 0 ? 1 : Math.ceil(size / ChunkSize);
}

/** sealedSize is the size of a file of size bytes once sealed. */
export function sealedSize(size: number): number {
  return size + chunks(size) * Overhead;
}

function nonce(i: number): Uint8Array {
  const n = new Uint8Array(12);
  new DataView(n.buffer).setBigUint64(4, BigInt(i));
  return n;
}

async function aesKey(raw: Uint8Array, use: KeyUsage): Promise<CryptoKey> {
  if (raw.length !== 32) throw new Error(`inboxd: an attachment key is 32 bytes, not ${raw.length}`);
  return crypto.subtle.importKey("raw", raw as BufferSource, "AES-GCM", false, [use]);
}

/** seal returns file sealed with key (32 bytes). */
export async function seal(file: Uint8Array, key: Uint8Array): Promise<Uint8Array> {
  return sealChunks(file, file.length, 0, chunks(file.length), key);
}

/**
 * sealChunks is seal for the chunks first to first+count-1 only of a file
 * of size bytes: plain is their plaintext (from byte first*ChunkSize of the
 * file, and nothing more). Chunks seal independently, with their index in
 * the whole file, so the parts of a multipart upload are sealed one at a
 * time (partOf says which chunks a part holds), and one is sealed again
 * after a restart to the same bytes.
 */
export async function sealChunks(plain: Uint8Array, size: number, first: number, count: number, key: Uint8Array): Promise<Uint8Array> {
  const n = chunks(size);
  if (!Number.isSafeInteger(first) || !Number.isSafeInteger(count) || first < 0 || count < 0 || first + count > n) {
    throw new Error(`inboxd: chunks ${first}+${count} of ${n}`);
  }
  const start = first * ChunkSize;
  const end = Math.min(size, (first + count) * ChunkSize);
  if (plain.length !== Math.max(0, end - start)) {
    throw new Error(`inboxd: chunks ${first}+${count} of a file of ${size} bytes are ${end - start} bytes, not ${plain.length}`);
  }
  const k = await aesKey(key, "encrypt");
  const out = new Uint8Array(plain.length + count * Overhead);
  for (let j = 0; j < count; j++) {
    const i = first + j;
    const ct = new Uint8Array(await crypto.subtle.encrypt(
      { name: "AES-GCM", iv: nonce(i) as BufferSource, additionalData: new Uint8Array([i === n - 1 ? 1 : 0]) as BufferSource },
      k, plain.subarray(j * ChunkSize, Math.min(plain.length, (j + 1) * ChunkSize)) as BufferSource));
    out.set(ct, j * (ChunkSize + Overhead));
  }
  return out;
}

/**
 * PartRange is what partOf says of a part of a multipart upload: the
 * chunks it holds (first, count; its plaintext starts at byte
 * first*ChunkSize of the file) and where its sealed bytes are in the
 * sealed object (offset, length: what its PUT carries).
 */
export interface PartRange {
  first: number;
  count: number;
  offset: number;
  length: number;
}

/**
 * parts is the number of parts of a multipart upload of a file of size
 * bytes in parts of partSize plaintext bytes (a multiple of ChunkSize; 0
 * otherwise).
 */
export function parts(size: number, partSize: number): number {
  if (!Number.isSafeInteger(partSize) || partSize <= 0 || partSize % ChunkSize !== 0) return 0;
  return Math.ceil(Math.max(size, 1) / partSize);
}

/**
 * partOf says which chunks part number (from 1) of a multipart upload of
 * a file of size bytes, in parts of partSize plaintext bytes, holds, and
 * where its sealed bytes are: the Go package protocol/sealed's PartOf.
 * Every part but the last holds partSize/ChunkSize whole chunks.
 */
export function partOf(size: number, partSize: number, number: number): PartRange {
  const n = parts(size, partSize);
  if (n === 0 || !Number.isInteger(number) || number < 1 || number > n) {
    throw new Error(`inboxd: part ${number} of ${size} bytes in parts of ${partSize}`);
  }
  const per = partSize / ChunkSize;
  const first = (number - 1) * per;
  const count = Math.min(per, chunks(size) - first);
  const offset = first * (ChunkSize + Overhead);
  const length = Math.min(sealedSize(size), (first + count) * (ChunkSize + Overhead)) - offset;
  return { first, count, offset, length };
}

/**
 * open returns the file of size bytes that sealedBytes holds, sealed with
 * key; it rejects bytes that were changed, reordered or cut short.
 */
export async function open(sealedBytes: Uint8Array, size: number, key: Uint8Array): Promise<Uint8Array> {
  if (sealedBytes.length !== sealedSize(size)) {
    throw new Error("inboxd: the attachment does not open with its key (wrong size)");
  }
  const k = await aesKey(key, "decrypt");
  const n = chunks(size);
  const out = new Uint8Array(size);
  for (let i = 0; i < n; i++) {
    const ct = sealedBytes.subarray(i * (ChunkSize + Overhead), Math.min(sealedBytes.length, (i + 1) * (ChunkSize + Overhead)));
    let plain: ArrayBuffer;
    try {
      plain = await crypto.subtle.decrypt(
        { name: "AES-GCM", iv: nonce(i) as BufferSource, additionalData: new Uint8Array([i === n - 1 ? 1 : 0]) as BufferSource },
        k, ct as BufferSource);
    } catch {
      throw new Error("inboxd: the attachment does not open with its key");
    }
    out.set(new Uint8Array(plain), i * ChunkSize);
  }
  return out;
}

/** thumbnailKey is the key of an image's thumbnail: HMAC-SHA256(key, "inboxd thumbnail"). */
export async function thumbnailKey(key: Uint8Array): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey("raw", key as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode("inboxd thumbnail")));
}

/** fromBase64Url decodes unpadded base64url. */
export function fromBase64Url(s: string): Uint8Array {
  const b64 = s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4);
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
