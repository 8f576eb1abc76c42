// Unread and mention counts of the demo (docs/protocol.md, "Unread and
// mention counts"). Each record keeps the server's unread_count and
// mention_count, and counted_seq: the last seq its counts include (the
// record's last_seq when it came from the list or a record entry). A text
// message of another sender past counted_seq adds 1 (and 1 mention when it
// names the user or @all) unless its conversation is open (read at once);
// one's own send or read clears the conversation's counts; a record entry
// replaces them. The header's totals are the sums over the records held:
// unread over those not muted, mentions over all.

export function makeCounts({ S, $ }) {
  const mentionsMe = (m) => Boolean(m.mention_all || (m.mentions || []).includes(S.user));

  // fresh marks a record from the server as counting everything to its last_seq.
  const fresh = (r) => Object.assign(r, { counted_seq: r.last_seq || 0 });

  // message applies message m to its conversation's record c.
  function message(c, m) {
    if (m.seq <= (c.counted_seq || 0)) return; // in the record's counts already
    c.counted_seq = m.seq;
    if (m.sender_id === S.user) {
      // A send moves one's read position past it: nothing is unread.
      Object.assign(c, { read_seq: Math.max(c.read_seq || 0, m.seq), unread_count: 0, mention_count: 0 });
      return;
    }
    if (m.kind !== 'text' || m.deleted || m.seq <= (c.read_seq || 0)) return;
    if (m.conversation_id === S.current) return; // read when shown
    c.unread_count = (c.unread_count || 0) + 1;
    if (mentionsMe(m)) c.mention_count = (c.mention_count || 0) + 1;
  }

  // read: the user read c to its end on this device.
  function read(c) {
    Object.assign(c, { unread_count: 0, mention_count: 0 });
  }

  // render shows the totals in the header.
  function render() {
    let unread = 0;
    let mention = 0;
    for (const c of S.convs.values()) {
      if (c.removed) continue;
      if (!c.muted) unread += c.unread_count || 0;
      mention += c.mention_count || 0;
    }
    $('#unread-total').textContent = unread;
    $('#unread-total').classList.toggle('zero', unread === 0);
    $('#mention-total').textContent = mention ? `@${mention}` : '';
  }

  // badge is the list's marker of record c: its unread count and an @
  // when it mentions the user.
  function badge(c) {
    if (!c.unread_count && !c.mention_count) return null;
    const span = document.createElement('span');
    span.className = 'unread';
    span.textContent = c.unread_count || 0;
    if (c.mention_count) {
      const at = document.createElement('span');
      at.className = 'mention';
      at.title = `${c.mention_count} mentioning you`;
      at.textContent = '@';
      span.prepend(at);
    }
    return span;
  }

  return { fresh, message, read, render, badge, mentionsMe };
}
