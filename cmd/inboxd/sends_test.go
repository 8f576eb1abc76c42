package main

import (
	"fmt"
	"net/http"
	"time"
)

// sendUntilSeq posts one text of msg_id id to conv through gw(attempt),
// retrying the same msg_id while the answer is 202 pending, 503 or no
// answer (what killed and restarting processes cause), until it has a
// seq (201 or 200). Any other answer is an error. It returns the seq and
// how many attempts were retried.
func sendUntilSeq(gw func(attempt int) *api, conv int64, id, body string) (seq int64, retried int, err error) {
	for attempt := 0; ; attempt++ {
		code, out, err := gw(attempt).call("POST", fmt.Sprintf("/v1/conversations/%d/messages", conv),
			map[string]any{"msg_id": id, "body": body})
		if err == nil && (code == http.StatusCreated || code == http.StatusOK) {
			return int64(out["seq"].(float64)), attempt, nil
		}
		if err == nil && code != http.StatusAccepted && code != http.StatusServiceUnavailable {
			return 0, attempt, fmt.Errorf("send %s: %d %v", id, code, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
