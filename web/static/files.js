// Attachments in the demo (docs/protocol.md, "Attachments"). The composer
// takes files from its picker, a paste or a drop, and uploads each at once
// through the SDK (client.upload seals it and PUTs it to the store), so a
// refusal (413 too large, 400 a type not accepted, 403 the quota) shows
// before the send; the send attaches the uploads that are ready. The SDK
// reports progress after each PUT (a part of a large file, or the whole of
// a small one; fetch tells nothing within a request body): a file shows
// "uploading… n%" until its upload ends.
//
// A message's attachments show their name, type and size. An image shows
// its thumbnail once an update entry of the message announces one (the
// attachment's `thumbnail`), opened with client.downloadThumbnail; until
// then a small image shows itself (client.download), a larger one a
// placeholder. Every attachment has a Download button: client.download
// opens the file and the page saves it through an object URL, then offers
// a Save link for it. The page draws the whole view again on every change,
// so the object URLs live here, keyed by attachment, and are revoked by the
// first render that no longer shows them (another conversation, a deleted
// message, a log out).

const MAX_FILES = 10; // per message (the protocol's bound)
const FULL_PREVIEW_MAX = 1 << 20; // an image up to this size shows itself until its thumbnail is there
const DIMENSIONS_MAX = 20 << 20; // an image up to this size is decoded for its width and height

// humanSize is a size in bytes as people read it: "512 B", "1.5 KiB", "20 MiB".
export function humanSize(n) {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

// mediaType is a file's type as the server takes it: lowercase, without
// parameters; a file the browser cannot name is octet-stream.
function mediaType(file) {
  const t = (file.type || '').split(';')[0].trim().toLowerCase();
  return t || 'application/octet-stream';
}

// reason is an SDK error's message without its "inboxd: 413 too_large: " prefix.
const reason = (e) => String((e && e.message) || e).replace(/^inboxd: (\d+ \S+: )?/, '');

// refusal says why an upload failed, in the user's words first.
function refusal(e) {
  switch (e && e.status) {
    case 413: return `too large: ${reason(e)}`;
    case 400: return `not accepted: ${reason(e)}`;
    case 403: return e.code === 'not_member' ? 'not accepted: you are not a member of this conversation' : `over your upload quota: ${reason(e)}`;
    default: return `upload failed: ${reason(e)}`;
  }
}

// dimensions are an image's width and height, sent with its upload so that
// every member can draw its box before the picture arrives.
async function dimensions(file, type) {
  if (!type.startsWith('image/') || file.size > DIMENSIONS_MAX || typeof createImageBitmap !== 'function') return {};
  try {
    const b = await createImageBitmap(file);
    const out = b.width <= 65536 && b.height <= 65536 ? { width: b.width, height: b.height } : {};
    b.close();
    return out;
  } catch {
    return {}; // not an image the browser reads: sent without
  }
}

export function makeFiles({ S, $, log, renderView }) {
  const F = {
    draft: [], // the composer's files: {cid, name, type, size, state: uploading|ready|refused, id, error}
    media: new Map(), // "<attachment id>/<thumb|full|file>" -> {state: loading|ready|failed, url}
    wanted: new Set(), // the media keys the render under way draws
    sent: new Map(), // msg_id -> the attachments of a send of this session (its pending row shows them)
  };

  // ---- the composer ----

  // add uploads files to the open conversation, each on its own.
  function add(files) {
    const cid = S.current;
    if (!cid || !S.client) return;
    for (const file of files) {
      if (F.draft.length >= MAX_FILES) {
        $('#notice').textContent = `at most ${MAX_FILES} files in one message`;
        break;
      }
      const d = { cid, name: file.name || 'file', type: mediaType(file), size: file.size, state: 'uploading' };
      F.draft.push(d);
      upload(d, file);
    }
    renderDraft();
  }

  async function upload(d, file) {
    try {
      if (d.size === 0) throw new Error('the file is empty');
      // The File itself: the SDK reads it a part at a time (large files
      // go in parts), and reports the sealed bytes sent.
      const onProgress = (sent, total) => {
        d.progress = Math.floor((100 * sent) / total);
        renderDraft();
      };
      const up = await S.client.upload(d.cid, { name: d.name, contentType: d.type, data: file, onProgress,
        ...(await dimensions(file, d.type)) });
      d.id = up.id;
      d.state = 'ready';
    } catch (e) {
      d.state = 'refused';
      d.error = refusal(e);
      if (F.draft.includes(d)) $('#notice').textContent = `${d.name}: ${d.error}`;
      log(`upload of ${d.name}: ${reason(e)}`);
    }
    // A file taken off the draft meanwhile is left to expire on the server.
    renderDraft();
  }

  const uploading = () => F.draft.some((d) => d.state === 'uploading');

  // take ends the draft: the attachments a send carries (the uploads that
  // are ready); refused files are dropped, their reason was shown.
  function take() {
    const ready = F.draft.filter((d) => d.state === 'ready')
      .map((d) => ({ id: d.id, name: d.name, content_type: d.type, size: d.size }));
    F.draft = [];
    renderDraft();
    return ready;
  }

  function clearDraft() {
    if (!F.draft.length) return;
    F.draft = [];
    renderDraft();
  }

  function renderDraft() {
    const ul = $('#draft');
    ul.replaceChildren();
    F.draft.forEach((d, i) => {
      const li = document.createElement('li');
      li.className = `draft ${d.state}`;
      li.dataset.state = d.state;
      const name = document.createElement('span');
      name.className = 'name';
      name.textContent = d.name;
      const info = document.createElement('span');
      info.className = 'info';
      info.textContent = ` ${d.type} · ${humanSize(d.size)} · `;
      const state = document.createElement('span');
      state.className = 'state';
      state.textContent = d.state === 'refused' ? d.error : (d.state === 'uploading' ? `uploading… ${d.progress ?? 0}%` : 'ready');
      const rm = document.createElement('button');
      rm.type = 'button';
      rm.className = 'remove';
      rm.textContent = '×';
      rm.setAttribute('aria-label', `remove ${d.name}`);
      rm.addEventListener('click', () => {
        F.draft.splice(i, 1);
        renderDraft();
      });
      li.append(name, info, state, ' ', rm);
      ul.append(li);
    });
    ul.hidden = !F.draft.length;
    const busy = uploading();
    $('#send-btn').disabled = busy;
    $('#send-btn').title = busy ? 'waiting for the uploads' : '';
    $('#compose-form').setAttribute('aria-busy', String(busy));
  }

  // ---- attachments of messages ----

  const isImage = (a) => (a.content_type || '').startsWith('image/');
  const mediaKey = (a, kind) => `${a.id}/${kind}`;

  // load returns what is held of one of an attachment's files (its
  // thumbnail, the image itself, the file to save), starting the download
  // the first time; the render under way draws it, so it is kept.
  function load(cid, a, kind) {
    if (!S.client) return { state: 'loading' }; // a view restored before the client started
    const k = mediaKey(a, kind);
    F.wanted.add(k);
    let e = F.media.get(k);
    if (e) return e;
    e = { state: 'loading' };
    F.media.set(k, e);
    const get = kind === 'thumb' ? S.client.downloadThumbnail(cid, a) : S.client.download(cid, a);
    get.then((bytes) => {
      if (F.media.get(k) !== e) return; // no longer shown: nothing to keep
      const type = kind === 'thumb' ? a.thumbnail.content_type : a.content_type;
      e.url = URL.createObjectURL(new Blob([bytes], { type }));
      e.state = 'ready';
      if (kind === 'file') save(e.url, a.name);
      renderView();
    }, (err) => {
      e.state = 'failed';
      log(`${kind === 'thumb' ? 'thumbnail' : 'download'} of ${a.name}: ${reason(err)}`);
      if (F.media.get(k) === e) renderView();
    });
    return e;
  }

  // save hands an object URL to the browser as a download named name.
  function save(url, name) {
    const link = document.createElement('a');
    link.href = url;
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
  }

  // download is the Download button of attachment id of message m.
  function download(cid, m, id) {
    const a = (m.attachments || []).find((x) => x.id === id);
    if (!a || !S.client) return;
    const e = F.media.get(mediaKey(a, 'file'));
    if (e && e.state === 'ready') save(e.url, a.name);
    else if (!e || e.state === 'failed') {
      F.media.delete(mediaKey(a, 'file'));
      load(cid, a, 'file');
      renderView();
    }
  }

  // el is the list of a message's attachments.
  function el(cid, m) {
    const ul = document.createElement('ul');
    ul.className = 'attachments';
    for (const a of m.attachments) ul.append(item(cid, a));
    return ul;
  }

  function item(cid, a) {
    const li = document.createElement('li');
    li.className = 'attachment';
    li.dataset.id = a.id;
    if (isImage(a)) li.append(preview(cid, a));
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = a.name;
    const type = document.createElement('span');
    type.className = 'type';
    type.textContent = a.content_type;
    const size = document.createElement('span');
    size.className = 'size';
    size.textContent = humanSize(a.size);
    size.title = `${a.size} bytes`;
    const info = document.createElement('div');
    info.className = 'info';
    info.append('📎 ', name, ' · ', type, ' · ', size, ' ', control(a));
    li.append(info);
    return li;
  }

  // control is the Download button, "opening…" while it runs, then a
  // Save link to the object URL.
  function control(a) {
    const e = F.media.has(mediaKey(a, 'file')) ? F.media.get(mediaKey(a, 'file')) : null;
    if (e) F.wanted.add(mediaKey(a, 'file'));
    if (e && e.state === 'ready') {
      const link = document.createElement('a');
      link.className = 'save';
      link.href = e.url;
      link.download = a.name;
      link.textContent = 'Save';
      link.setAttribute('aria-label', `save ${a.name}`);
      return link;
    }
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.act = 'download';
    b.className = 'download';
    b.setAttribute('aria-label', `download ${a.name}`);
    if (e && e.state === 'loading') {
      b.textContent = 'opening…';
      b.disabled = true;
    } else {
      b.textContent = e ? 'Download (failed, again)' : 'Download';
    }
    return b;
  }

  // preview is an image's picture: its thumbnail once announced and
  // opened; until then the image itself when small, or a placeholder.
  function preview(cid, a) {
    const thumb = a.thumbnail ? load(cid, a, 'thumb') : null;
    let shown = null;
    let source = '';
    if (thumb && thumb.state === 'ready') {
      shown = thumb;
      source = 'thumbnail';
    } else if (a.size <= FULL_PREVIEW_MAX && (!thumb || thumb.state === 'failed' || F.media.has(mediaKey(a, 'full')))) {
      const full = load(cid, a, 'full');
      if (full.state === 'ready') {
        shown = full;
        source = 'full';
      }
    }
    const box = document.createElement('div');
    box.className = 'preview';
    const dims = source === 'thumbnail' ? a.thumbnail : a;
    if (shown) {
      const img = document.createElement('img');
      img.src = shown.url;
      img.alt = a.name;
      img.dataset.source = source;
      if (dims.width && dims.height) {
        img.width = dims.width;
        img.height = dims.height;
      }
      img.addEventListener('error', () => {
        if (shown.state !== 'ready') return;
        shown.state = 'failed'; // not a picture the browser draws
        renderView();
      }, { once: true });
      box.append(img);
      return box;
    }
    const ph = document.createElement('div');
    ph.className = 'placeholder';
    ph.setAttribute('role', 'img');
    const failed = (thumb && thumb.state === 'failed') || (F.media.get(mediaKey(a, 'full')) || {}).state === 'failed';
    const loading = (thumb && thumb.state === 'loading') || (F.media.get(mediaKey(a, 'full')) || {}).state === 'loading';
    const text = failed ? 'no preview' : (loading ? 'loading preview…' : 'preview not ready yet');
    ph.textContent = `🖼 ${text}`;
    ph.setAttribute('aria-label', `${a.name}: ${text}`);
    if (a.width && a.height) ph.style.aspectRatio = `${a.width} / ${a.height}`;
    box.append(ph);
    return box;
  }

  // pendingEl lists the attachments of a send not yet in the conversation.
  function pendingEl(atts) {
    const ul = document.createElement('ul');
    ul.className = 'attachments';
    for (const a of atts) {
      const li = document.createElement('li');
      li.className = 'attachment';
      li.textContent = `📎 ${a.name} · ${a.content_type} · ${humanSize(a.size)}`;
      ul.append(li);
    }
    return ul;
  }

  // beginRender and endRender bracket a render of the view: what it did
  // not draw is forgotten and its object URLs revoked.
  function beginRender() {
    F.wanted.clear();
  }

  function endRender() {
    for (const [k, e] of F.media) {
      if (F.wanted.has(k)) continue;
      if (e.url) URL.revokeObjectURL(e.url);
      F.media.delete(k);
    }
  }

  // retry forgets the downloads that failed (offline, say), so that the
  // next render starts them again: the page calls it when it reconnects.
  function retry() {
    let any = false;
    for (const [k, e] of F.media) {
      if (e.state !== 'failed') continue;
      if (e.url) URL.revokeObjectURL(e.url); // an image the browser would not draw
      F.media.delete(k);
      any = true;
    }
    if (any) renderView();
  }

  // reset forgets everything (log out).
  function reset() {
    F.draft = [];
    F.sent.clear();
    beginRender();
    endRender();
    renderDraft();
  }

  // names is what a message's attachments read as in a one-line summary.
  const names = (atts) => `📎 ${atts.map((a) => a.name).join(', ')}`;

  return {
    add, take, clearDraft, uploading, renderDraft, download, el, pendingEl, beginRender, endRender, retry, reset, names,
    sent: F.sent,
  };
}
