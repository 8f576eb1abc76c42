// inboxd demo client. It follows docs/protocol.md's client rules:
// - (epoch, cursor), each conversation's last seq and the outbox persist in
//   localStorage, per user; the tab's user is in sessionStorage, so two tabs
//   can be two users;
// - it connects after a random startup delay, reconnects with capped
//   exponential backoff and full jitter, resets the backoff only after a
//   stable period, honours retry_after_ms and close codes (4001 and 4003 stop),
//   and falls back to long-polling (with _polling) when the WebSocket keeps
//   failing, trying the WebSocket again later;
// - entries are applied in inbox_seq order; an entry that skips ahead, or a
//   heartbeat head past the cursor, waits briefly and then pulls after=cursor
//   over HTTP; on too_long it jumps to the head, refreshes the conversation
//   list and forgets the loaded histories (holes are backfilled when a
//   conversation is opened);
// - sends are retried with the same msg_id until they have a seq or a
//   permanent error, and queue while offline.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);

  const BACKOFF_BASE = 500;
  const BACKOFF_CAP = 30000;
  const STABLE_MS = 10000;
  const CIRCUIT_FAILURES = 6;
  const POLL_FOR_MS = 60000;
  const PULL_DELAY_MS = 700;

  const S = {
    user: 0,
    token: '',
    epoch: null,
    cursor: 0,
    head: 0,
    convs: new Map(), // conversation_id -> record (+ unread)
    msgs: new Map(), // conversation_id -> Map(seq -> message)
    loaded: new Set(), // conversations whose recent history was loaded
    convSeq: {}, // conversation_id -> last seq seen (persisted)
    current: 0,
    outbox: [], // {msg_id, conversation_id, body, status, error}
    ws: null,
    mode: 'offline', // offline | connecting | online | polling
    wantOnline: false,
    attempt: 0,
    failures: 0,
    stableTimer: null,
    reconnectTimer: null,
    pullTimer: null,
    pulling: false,
    retryAfterMs: 0,
    welcomeHead: 0,
    caughtUp: 0,
    pollAbort: null,
    wsRetryAt: 0,
  };

  // ---- persistence ----

  const key = (k) => `inboxd.${S.user}.${k}`;
  const load = (k, def) => {
    try {
      const v = localStorage.getItem(key(k));
      return v === null ? def : JSON.parse(v);
    } catch (e) {
      return def;
    }
  };
  const save = (k, v) => localStorage.setItem(key(k), JSON.stringify(v));
  const saveCursor = () => {
    save('epoch', S.epoch);
    save('cursor', S.cursor);
    save('convseq', S.convSeq);
    $('#epoch').textContent = S.epoch ?? '-';
    $('#cursor').textContent = S.cursor;
    $('#head').textContent = S.head;
  };
  const saveOutbox = () => {
    save('outbox', S.outbox);
    $('#outbox').textContent = S.outbox.filter((o) => o.status === 'pending').length;
  };

  // ---- small helpers ----

  const log = (text) => {
    const li = document.createElement('li');
    li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
    const ol = $('#log');
    ol.prepend(li);
    while (ol.children.length > 200) ol.lastChild.remove();
  };

  const setStatus = (mode) => {
    S.mode = mode;
    const el = $('#status');
    el.textContent = mode;
    el.className = `status ${mode}`;
    $('#net-toggle').textContent = S.wantOnline ? 'Go offline' : 'Go online';
  };

  const uuid = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  };

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // Full jitter over a capped exponential.
  const backoff = () => {
    const d = Math.random() * Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** S.attempt);
    S.attempt = Math.min(S.attempt + 1, 16);
    return d;
  };

  class APIError extends Error {
    constructor(status, body, retryAfter) {
      super(body?.error?.message || `HTTP ${status}`);
      this.status = status;
      this.code = body?.error?.code;
      this.retryable = status === 0 || body?.error?.retryable === true;
      this.retryAfter = retryAfter;
    }
  }

  async function api(method, path, body, signal) {
    let res;
    try {
      res = await fetch(path, {
        method,
        signal,
        headers: Object.assign({ Authorization: `Bearer ${S.token}` },
          body === undefined ? {} : { 'Content-Type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError(0, null, 1);
    }
    let data = null;
    if (res.status !== 304) {
      try {
        data = await res.json();
      } catch (e) {
        data = null;
      }
    }
    if (!res.ok) {
      const err = new APIError(res.status, data, Number(res.headers.get('Retry-After') || 1));
      if (res.status === 401) logout('session expired, log in again');
      throw err;
    }
    return data;
  }

  // ---- the conversation list ----

  async function loadList() {
    let page = null;
    let first = true;
    const fresh = new Map();
    for (;;) {
      const q = `/v1/conversations?limit=200${page ? `&page=${encodeURIComponent(page)}` : ''}`;
      const res = await api('GET', q);
      if (first) {
        first = false;
        // The head is read before the list: start from it on a first run
        // or a new epoch; a stored cursor of this epoch catches up instead.
        if (S.epoch !== res.epoch || S.cursor === null) {
          S.epoch = res.epoch;
          S.cursor = res.inbox_head;
          S.head = res.inbox_head;
          saveCursor();
        }
      }
      for (const r of res.conversations) {
        const old = S.convs.get(r.conversation_id);
        fresh.set(r.conversation_id, Object.assign({}, r, { unread: old ? old.unread : 0 }));
      }
      if (!res.next_page) break;
      page = res.next_page;
    }
    S.convs = fresh;
    renderList();
  }

  let refreshSoon = null;
  const refreshListSoon = () => {
    if (refreshSoon) return;
    refreshSoon = setTimeout(() => {
      refreshSoon = null;
      loadList().catch((e) => log(`list: ${e.message}`));
    }, 300);
  };

  const activity = (c) => (c.last_message ? Date.parse(c.last_message.created_at) : 0);

  function renderList() {
    const ul = $('#convs');
    ul.replaceChildren();
    const convs = [...S.convs.values()].sort((a, b) =>
      (b.pinned - a.pinned) || (activity(b) - activity(a)) || (b.conversation_id - a.conversation_id));
    for (const c of convs) {
      const li = document.createElement('li');
      li.dataset.cid = c.conversation_id;
      if (c.conversation_id === S.current) li.classList.add('current');
      if (c.removed) li.classList.add('removed');
      const title = document.createElement('div');
      title.className = 'title';
      title.textContent = c.title || `#${c.conversation_id}`;
      if (c.unread) {
        const u = document.createElement('span');
        u.className = 'unread';
        u.textContent = c.unread;
        title.append(u);
      }
      const last = document.createElement('div');
      last.className = 'last';
      last.textContent = c.last_message ? describe(c.last_message) : '';
      li.append(title, last);
      li.addEventListener('click', () => open(c.conversation_id));
      ul.append(li);
    }
  }

  // ---- a conversation ----

  const msgsOf = (cid) => {
    let m = S.msgs.get(cid);
    if (!m) {
      m = new Map();
      S.msgs.set(cid, m);
    }
    return m;
  };

  function describe(m) {
    if (m.kind !== 'system') return `${m.sender_id}: ${m.body}`;
    const b = m.body || {};
    switch (b.event) {
      case 'conversation.created': return `user ${b.by} created "${b.title}"`;
      case 'member.added': return `user ${b.user_id} was added by ${b.by}`;
      case 'member.removed': return `user ${b.user_id} was removed by ${b.by}`;
      default: return JSON.stringify(b);
    }
  }

  async function open(cid) {
    S.current = cid;
    const c = S.convs.get(cid);
    if (c) c.unread = 0;
    $('#view-title').textContent = c ? c.title || `#${cid}` : `#${cid}`;
    $('#compose-form').hidden = false;
    renderList();
    renderView();
    if (!S.loaded.has(cid)) {
      try {
        const res = await api('GET', `/v1/conversations/${cid}/messages?limit=50`);
        const ms = msgsOf(cid);
        for (const m of res.messages) ms.set(m.seq, m);
        S.loaded.add(cid);
        if (S.current === cid) renderView();
      } catch (e) {
        log(`history of ${cid}: ${e.message}`);
      }
    }
    $('#compose').focus();
  }

  function renderView() {
    const box = $('#messages');
    box.replaceChildren();
    if (!S.current) return;
    const seqs = [...msgsOf(S.current).keys()].sort((a, b) => a - b);
    let prev = 0;
    for (const seq of seqs) {
      const m = msgsOf(S.current).get(seq);
      if (prev && seq > prev + 1 && S.loaded.has(S.current)) {
        const hole = document.createElement('div');
        hole.className = 'msg system hole';
        hole.textContent = `… ${seq - prev - 1} not shown (before your time or not loaded)`;
        box.append(hole);
      }
      prev = seq;
      box.append(messageEl(m, m.sender_id === S.user ? 'sent' : ''));
    }
    for (const o of S.outbox) {
      if (o.conversation_id !== S.current || msgById(o.conversation_id, o.msg_id)) continue;
      box.append(messageEl({ msg_id: o.msg_id, seq: o.seq, sender_id: S.user, kind: 'text', body: o.body }, o.status, o.error));
    }
    box.scrollTop = box.scrollHeight;
  }

  function messageEl(m, status, error) {
    const div = document.createElement('div');
    div.className = 'msg';
    div.dataset.msgId = m.msg_id;
    if (m.seq) div.dataset.seq = m.seq;
    if (m.kind === 'system') div.classList.add('system');
    else if (m.sender_id === S.user) div.classList.add('mine');
    if (status) div.classList.add(status);
    const body = document.createElement('div');
    body.className = 'body';
    body.textContent = m.kind === 'system' ? describe(m) : m.body;
    div.append(body);
    if (m.kind !== 'system') {
      const meta = document.createElement('div');
      meta.className = 'meta';
      meta.textContent = m.seq ? `user ${m.sender_id} · #${m.seq}` : (error ? `failed: ${error}` : 'sending…');
      div.append(meta);
    }
    return div;
  }

  const msgById = (cid, id) => [...msgsOf(cid).values()].find((m) => m.msg_id === id);

  // ---- applying the inbox ----

  function apply(e) {
    if (e.kind === 'message' && e.message) {
      const m = e.message;
      const cid = m.conversation_id;
      let c = S.convs.get(cid);
      if (!c) {
        c = { conversation_id: cid, title: '', unread: 0, last_seq: 0 };
        S.convs.set(cid, c);
        refreshListSoon(); // a conversation we did not know: its record follows
      }
      if (m.seq >= (c.last_seq || 0)) {
        c.last_seq = m.seq;
        c.last_message = m;
      }
      msgsOf(cid).set(m.seq, m);
      S.convSeq[cid] = Math.max(S.convSeq[cid] || 0, m.seq);
      if (cid !== S.current && m.sender_id !== S.user && m.kind === 'text') c.unread = (c.unread || 0) + 1;
      const i = S.outbox.findIndex((o) => o.msg_id === m.msg_id);
      if (i >= 0) {
        S.outbox.splice(i, 1);
        saveOutbox();
      }
    } else if (e.kind === 'record' && e.record) {
      const r = e.record;
      const old = S.convs.get(r.conversation_id);
      if (!old || !old.version || r.version >= old.version) {
        S.convs.set(r.conversation_id, Object.assign({}, old, r, { unread: old ? old.unread : 0 }));
      }
    }
  }

  function onEntries(entries, head) {
    let gap = false;
    for (const e of entries) {
      if (e.inbox_seq <= S.cursor) continue; // already applied (a pull overlapped)
      if (e.inbox_seq > S.cursor + 1) {
        gap = true;
        break;
      }
      apply(e);
      S.cursor = e.inbox_seq;
      if (S.welcomeHead && e.inbox_seq <= S.welcomeHead) S.caughtUp++;
    }
    S.head = Math.max(S.head, head || 0);
    saveCursor();
    if (S.welcomeHead && S.cursor >= S.welcomeHead) {
      if (S.caughtUp > 0) {
        $('#catchup').textContent = `caught up ${S.caughtUp} missed ${S.caughtUp === 1 ? 'entry' : 'entries'}`;
        log(`catch-up: ${S.caughtUp} entries`);
      }
      S.welcomeHead = 0;
    }
    if (gap) schedulePull();
    renderList();
    renderView();
  }

  async function onTooLong(f) {
    log(`too_long: jumping from ${S.cursor} to ${f.head}, refreshing the list`);
    S.epoch = f.epoch;
    S.cursor = f.head;
    S.head = f.head;
    S.welcomeHead = 0;
    saveCursor();
    // Every loaded history may now have holes: backfill lazily.
    S.msgs.clear();
    S.loaded.clear();
    // Acked sends whose entries fell into the jump are done.
    S.outbox = S.outbox.filter((o) => o.status !== 'sent');
    saveOutbox();
    $('#catchup').textContent = 'too long offline: conversation list refreshed';
    try {
      await loadList();
    } catch (e) {
      log(`list: ${e.message}`);
    }
    if (S.current) open(S.current);
  }

  // A skipped inbox_seq or a heartbeat ahead of the cursor: pushes may be
  // reordered across reconnects, so wait a moment, then pull what is missing.
  function schedulePull() {
    if (S.pullTimer) return;
    S.pullTimer = setTimeout(async () => {
      S.pullTimer = null;
      if (S.cursor < S.head) await pull();
    }, PULL_DELAY_MS);
  }

  async function pull() {
    if (S.pulling) return;
    S.pulling = true;
    try {
      for (;;) {
        const res = await api('GET', `/v1/sync?after=${S.cursor}&epoch=${S.epoch}&limit=200`);
        if (res.too_long) {
          await onTooLong(res);
          return;
        }
        onEntries(res.entries, res.head);
        if (!res.has_more) return;
      }
    } catch (e) {
      log(`pull: ${e.message}`);
    } finally {
      S.pulling = false;
    }
  }

  // ---- the WebSocket ----

  const wsURL = () =>
    `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws?access_token=${encodeURIComponent(S.token)}`;

  function connect() {
    clearTimeout(S.reconnectTimer);
    S.reconnectTimer = null;
    if (!S.wantOnline || S.ws) return;
    if (Date.now() < S.wsRetryAt) {
      poll();
      return;
    }
    setStatus('connecting');
    const ws = new WebSocket(wsURL());
    S.ws = ws;
    let welcomed = false;
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: 'hello', after: S.cursor, epoch: S.epoch }));
    };
    ws.onmessage = (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (f.type === 'welcome') welcomed = true;
      onFrame(f);
    };
    ws.onclose = (ev) => {
      if (S.ws !== ws) return;
      S.ws = null;
      clearTimeout(S.stableTimer);
      onClose(ev.code, ev.reason, welcomed);
    };
  }

  function onFrame(f) {
    switch (f.type) {
      case 'welcome':
        setStatus('online');
        log(`welcome: epoch ${f.epoch}, head ${f.head}, cursor ${S.cursor}`);
        S.head = f.head;
        S.epoch = f.epoch;
        S.caughtUp = 0;
        S.welcomeHead = f.head > S.cursor ? f.head : 0;
        saveCursor();
        // Only a stable connection resets the backoff.
        S.stableTimer = setTimeout(() => {
          S.attempt = 0;
          S.failures = 0;
        }, STABLE_MS);
        flushOutbox();
        break;
      case 'entries':
        onEntries(f.entries, f.head);
        break;
      case 'too_long':
        onTooLong(f);
        break;
      case 'heartbeat':
        S.head = Math.max(S.head, f.head);
        $('#head').textContent = S.head;
        if (f.head > S.cursor) schedulePull();
        break;
      case 'send_ack':
        acked(f.msg_id, f.seq);
        break;
      case 'error':
        onError(f);
        break;
      default:
        break; // pong and frames of newer servers
    }
  }

  function onClose(code, reason, welcomed) {
    if (!S.wantOnline) {
      setStatus('offline');
      return;
    }
    log(`socket closed: ${code} ${reason || ''}`);
    if (code === 4001) {
      logout('unauthorized: log in again');
      return;
    }
    if (code === 4003) {
      S.wantOnline = false;
      setStatus('offline');
      log('not allowed to connect from here');
      return;
    }
    if (!welcomed) S.failures++;
    if (S.failures >= CIRCUIT_FAILURES) {
      // The WebSocket keeps failing (a proxy that does not pass it?):
      // long-poll for a while, then try it again.
      log('WebSocket keeps failing: long-polling for a minute');
      S.failures = 0;
      S.wsRetryAt = Date.now() + POLL_FOR_MS;
      poll();
      return;
    }
    let delay = backoff();
    if (code === 4029 && S.retryAfterMs) delay = S.retryAfterMs + Math.random() * 1000;
    S.retryAfterMs = 0;
    setStatus('connecting');
    S.reconnectTimer = setTimeout(connect, delay);
  }

  // ---- long-polling fallback ----

  async function poll() {
    if (S.pollAbort) return;
    const ctl = new AbortController();
    S.pollAbort = ctl;
    setStatus('polling');
    flushOutbox();
    try {
      while (S.wantOnline && Date.now() < S.wsRetryAt) {
        try {
          const res = await api('GET', `/v1/sync?after=${S.cursor}&epoch=${S.epoch}&limit=200&wait=25`, undefined, ctl.signal);
          if (res.too_long) await onTooLong(res);
          else onEntries(res.entries, res.head);
          const hint = res._polling ? res._polling.next_interval_ms : 0;
          if (!res.has_more && !res.too_long && res.entries && res.entries.length === 0 && hint) await sleep(Math.random() * hint);
        } catch (e) {
          if (e.name === 'AbortError') return;
          if (e.status && !e.retryable) {
            log(`poll: ${e.message}`);
            return;
          }
          await sleep(e.retryAfter ? e.retryAfter * 1000 : backoff());
        }
      }
    } finally {
      if (S.pollAbort === ctl) S.pollAbort = null;
    }
    if (S.wantOnline) connect();
  }

  // ---- sends ----

  function send(body) {
    const item = { msg_id: uuid(), conversation_id: S.current, body, status: 'pending' };
    S.outbox.push(item);
    saveOutbox();
    renderView();
    transmit(item);
  }

  function transmit(item) {
    if (item.status !== 'pending') return;
    if (S.mode === 'online' && S.ws && S.ws.readyState === WebSocket.OPEN) {
      S.ws.send(JSON.stringify({ type: 'send', conversation_id: item.conversation_id, msg_id: item.msg_id, body: item.body }));
    } else if (S.mode === 'polling') {
      httpSend(item);
    } // else offline: it stays in the outbox and goes out on the next welcome
  }

  function flushOutbox() {
    for (const o of S.outbox) transmit(o);
  }

  async function httpSend(item) {
    try {
      const res = await api('POST', `/v1/conversations/${item.conversation_id}/messages`, { msg_id: item.msg_id, body: item.body });
      if (res && res.seq) {
        // The answer is the message itself.
        apply({ kind: 'message', message: res });
        renderList();
        renderView();
      }
      else setTimeout(() => transmit(item), 1000 + Math.random() * 1000); // 202 pending
    } catch (e) {
      if (e.retryable || e.status === 0) setTimeout(() => transmit(item), (e.retryAfter || 1) * 1000 + Math.random() * 1000);
      else failed(item.msg_id, e.message);
    }
  }

  // acked marks a send as done: it has its seq. It stays shown from the
  // outbox until its entry arrives (apply removes it), so it does not
  // flicker away between the ack and the push.
  function acked(id, seq) {
    const o = S.outbox.find((x) => x.msg_id === id);
    if (o) {
      o.status = 'sent';
      o.seq = seq;
      saveOutbox();
    }
    renderView();
  }

  function failed(id, why) {
    const o = S.outbox.find((x) => x.msg_id === id);
    if (o) {
      o.status = 'failed';
      o.error = why;
      saveOutbox();
    }
    renderView();
  }

  function onError(f) {
    if (f.code === 'rate_limited' && !f.msg_id) S.retryAfterMs = f.retry_after_ms || 0;
    if (!f.msg_id) {
      log(`error: ${f.code}: ${f.message}`);
      return;
    }
    const o = S.outbox.find((x) => x.msg_id === f.msg_id);
    if (!o) return;
    if (f.retryable) setTimeout(() => transmit(o), (f.retry_after_ms || 1000) + Math.random() * 1000);
    else failed(f.msg_id, f.message);
  }

  // ---- online / offline, login / logout ----

  function goOnline() {
    S.wantOnline = true;
    S.attempt = 0;
    S.failures = 0;
    S.wsRetryAt = 0;
    setStatus('connecting');
    connect();
  }

  function goOffline() {
    S.wantOnline = false;
    clearTimeout(S.reconnectTimer);
    clearTimeout(S.stableTimer);
    clearTimeout(S.pullTimer);
    S.pullTimer = null;
    if (S.pollAbort) S.pollAbort.abort();
    if (S.ws) {
      const ws = S.ws;
      S.ws = null;
      ws.close(1000, 'offline');
    }
    setStatus('offline');
    log(`offline at cursor ${S.cursor}`);
  }

  async function start() {
    $('#login').hidden = true;
    $('#app').hidden = false;
    $('#net-toggle').hidden = false;
    $('#logout-btn').hidden = false;
    $('#who').textContent = `user ${S.user}`;
    S.epoch = load('epoch', null);
    S.cursor = load('cursor', null);
    S.convSeq = load('convseq', {});
    S.outbox = load('outbox', []);
    saveOutbox();
    try {
      await loadList();
    } catch (e) {
      log(`list: ${e.message}`);
      if (S.cursor === null) S.cursor = 0;
    }
    saveCursor();
    // A random startup delay spreads reconnects after a mass restart.
    S.reconnectTimer = setTimeout(goOnline, Math.random() * 300);
  }

  function logout(why) {
    goOffline();
    sessionStorage.removeItem('inboxd.user');
    if (S.user) localStorage.removeItem(key('token'));
    S.user = 0;
    S.token = '';
    S.convs.clear();
    S.msgs.clear();
    S.loaded.clear();
    S.current = 0;
    $('#app').hidden = true;
    $('#login').hidden = false;
    $('#net-toggle').hidden = true;
    $('#logout-btn').hidden = true;
    $('#who').textContent = '';
    $('#login-error').textContent = why || '';
  }

  $('#login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const id = Number($('#user-id').value);
    if (!(id > 0)) return;
    try {
      const res = await fetch('/v1/dev/token', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ user_id: id }),
      });
      const data = await res.json();
      if (!res.ok) throw new Error(data?.error?.message || `HTTP ${res.status}`);
      S.user = id;
      S.token = data.token;
      sessionStorage.setItem('inboxd.user', String(id));
      save('token', data.token);
      start();
    } catch (e) {
      $('#login-error').textContent = `login failed: ${e.message} (is dev mode on?)`;
    }
  });

  $('#logout-btn').addEventListener('click', () => logout(''));
  $('#net-toggle').addEventListener('click', () => (S.wantOnline ? goOffline() : goOnline()));

  $('#create-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const members = $('#new-members').value.split(/[\s,]+/).filter(Boolean).map(Number).filter((n) => n > 0);
    try {
      const res = await api('POST', '/v1/conversations', { title: $('#new-title').value, members });
      $('#new-title').value = '';
      $('#new-members').value = '';
      log(`created conversation ${res.conversation_id}`);
      await loadList();
      open(res.conversation_id);
    } catch (e) {
      log(`create: ${e.message}`);
    }
  });

  $('#compose-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = $('#compose').value;
    if (!body || !S.current) return;
    $('#compose').value = '';
    send(body);
  });

  // Resume the tab's session (a reload keeps the user, cursor and outbox).
  const saved = Number(sessionStorage.getItem('inboxd.user'));
  if (saved > 0) {
    S.user = saved;
    S.token = load('token', '');
    if (S.token) start();
    else S.user = 0;
  }
})();
