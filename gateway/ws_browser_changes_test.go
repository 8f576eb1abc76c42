package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestWSBrowserChanges: changes of messages in the demo. User 1 edits,
// reacts to and deletes a message through the page (clicks and keys), and
// user 2's window shows each change live; user 2 reacts too and replies, and
// user 1, the conversation's creator, deletes the reply (moderation).
func TestWSBrowserChanges(t *testing.T) {
	d := newDemo(t)
	alice, bob := d.tab("alice"), d.tab("bob")
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "changes", 2)
	d.say(alice, "hello bob")
	d.do(bob, "see the message", until(confirmed("hello bob")))

	seqOf := func(ctx context.Context, text string) int {
		t.Helper()
		seq, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(
			`Number([...document.querySelectorAll('#messages .msg[data-seq]')].find(e => e.querySelector('.body').textContent === %q).dataset.seq)`, text)))
		require.NoError(t, err)
		require.Positive(t, seq)
		return seq
	}
	seq := seqOf(alice, "hello bob")
	msg := fmt.Sprintf(`#messages .msg[data-seq="%d"]`, seq)
	// q is a JavaScript expression for the first element of sel in msg.
	q := func(sel string) string { return fmt.Sprintf(`document.querySelector(%q)`, msg+" "+sel) }
	chip := func(emoji string) string { return q(fmt.Sprintf(`.chip[data-emoji=%q]`, emoji)) }
	// settled: no change of the page's is waiting for its ack, so no
	// re-render is due under the next click.
	settled := `!document.querySelector('#messages').textContent.includes('saving…')`

	d.do(alice, "her own message can be edited and deleted",
		until(q("button.edit")+" && "+q("button.delete")))
	d.do(bob, "someone else's cannot",
		until(q("button.reply")+" && !"+q("button.edit")+" && !"+q("button.delete")))

	// A report of someone else's message goes to the moderators' queue.
	d.do(alice, "no report of her own", until("!"+q("button.report")))
	d.do(bob, "report it",
		press(msg+" button.report"),
		until(fmt.Sprintf(`document.querySelector('#notice').textContent === 'reported #%d to the moderators'`, seq)))
	// On several servers, the conversation's holds it; a report answered
	// pending (202) is projected a moment later.
	waitFor(t, 30*time.Second, "the report in the queue", func() bool {
		reports := 0
		for _, pool := range d.env.Pools {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(),
				`SELECT count(*) FROM reports WHERE reporter_id = 2 AND seq = $1`, seq).Scan(&n))
			reports += n
		}
		return reports == 1
	})

	// An inline edit: the field opens on the text, the caret at its end.
	d.do(alice, "edit",
		press(msg+" button.edit"),
		chromedp.WaitVisible(chromedp.CSS(msg+" .edit-input")),
		chromedp.SendKeys(chromedp.CSS(msg+" .edit-input"), "!\n"),
		until(q(".body")+"?.textContent === 'hello bob!' && "+q(".edited")+" && "+settled),
	)
	d.do(bob, "see the edit live",
		until(q(".body")+"?.textContent === 'hello bob!' && "+q(".edited")+"?.textContent === ' (edited)'"))

	// Reactions: counts for everyone, one's own highlighted.
	d.do(alice, "react",
		press(msg+` button.pick[data-emoji="👍"]`),
		until(chip("👍")+"?.textContent === '👍 1' && "+chip("👍")+".classList.contains('me') && "+settled),
	)
	d.do(bob, "see the reaction live, not as his",
		until(chip("👍")+"?.textContent === '👍 1' && !"+chip("👍")+".classList.contains('me')"))
	d.do(bob, "add his by clicking the chip",
		press(msg+` .chip[data-emoji="👍"]`),
		until(chip("👍")+"?.textContent === '👍 2' && "+chip("👍")+".classList.contains('me') && "+settled),
	)
	d.do(alice, "see the count grow",
		until(chip("👍")+"?.textContent === '👍 2' && "+chip("👍")+".classList.contains('me')"))
	d.do(alice, "take hers back by clicking the chip",
		press(msg+` .chip[data-emoji="👍"]`),
		until(chip("👍")+"?.textContent === '👍 1' && !"+chip("👍")+".classList.contains('me') && "+settled),
	)
	d.do(bob, "see the count shrink, his still highlighted",
		until(chip("👍")+"?.textContent === '👍 1' && "+chip("👍")+".classList.contains('me')"))
	d.do(alice, "react again",
		press(msg+` button.pick[data-emoji="🎉"]`),
		until(chip("🎉")+"?.textContent === '🎉 1' && "+chip("🎉")+".classList.contains('me') && "+settled),
	)
	d.do(bob, "see both reactions", until(chip("🎉")+"?.textContent === '🎉 1' && "+chip("👍")+"?.textContent === '👍 1'"))

	// A reply quotes its target.
	quote := func(text string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg .quote')].some(e => e.textContent === %q)`, text)
	}
	d.do(bob, "reply",
		press(msg+" button.reply"),
		until(fmt.Sprintf(`document.querySelector('#reply-text').textContent === '↩ replying to #%d 1: hello bob!'`, seq)),
		chromedp.SendKeys("#compose", "glad you fixed it"),
		chromedp.Click("#send-btn"),
		until(confirmed("glad you fixed it")),
		until(`document.querySelector('#reply-bar').hidden`),
	)
	d.do(alice, "see the reply, quoting", until(confirmed("glad you fixed it")+" && "+quote(fmt.Sprintf("↩ #%d 1: hello bob!", seq))))
	d.screenshots("changed", map[string]context.Context{"alice": alice, "bob": bob})

	// The delete: a placeholder, no reactions; the reply's quote follows.
	gone := fmt.Sprintf(`%s?.classList.contains('deleted') && %s?.textContent === 'message deleted' && !%s && !%s && %s`,
		fmt.Sprintf(`document.querySelector(%q)`, msg), q(".body"), q(".reactions"), q(".edited"),
		quote(fmt.Sprintf("↩ #%d 1: message deleted", seq)))
	d.do(alice, "delete",
		press(msg+" button.delete"),
		until(gone+" && "+settled),
	)
	d.do(bob, "see the delete live", until(gone))

	// The creator may delete anyone's message.
	reply := seqOf(bob, "glad you fixed it")
	rmsg := fmt.Sprintf(`#messages .msg[data-seq="%d"]`, reply)
	rgone := fmt.Sprintf(`document.querySelector(%q)?.classList.contains('deleted')`, rmsg)
	d.do(alice, "moderate",
		press(rmsg+" button.delete"),
		until(rgone+" && "+settled),
	)
	d.do(bob, "see his reply deleted", until(rgone))
	d.screenshots("deleted", map[string]context.Context{"alice": alice, "bob": bob})
}
