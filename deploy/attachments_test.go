package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// checkAttachments: a file goes through the load balancer and the object
// store as a client sends it (docs/protocol.md, "Attachments"): alice asks
// for an upload, seals the file and PUTs it to the presigned URL, which
// points at the store as the file names it for clients (the gateways'
// INBOXD_S3_ENDPOINT); she sends a message attaching it; bob finds it in
// his sync, and his download answers 302 to a presigned GET of the same
// sealed bytes, which open with the key his message carries. The store
// refuses the same PUT unsigned, and the gateway a download by someone
// who is not a member.
func checkAttachments(t *testing.T, ctx context.Context, tp *topology, secret string, logf func(string, ...any)) {
	_, lbAddr := loadBalancer(t, tp)
	via := func(user int64) *apiClient {
		return &apiClient{name: "the load balancer", base: "http://" + lbAddr, token: token(t, secret, user)}
	}
	gws := byCommand(tp, "inboxd", "gateway")
	require.NotEmpty(t, gws)
	endpoint, err := tp.rewrite(gws[0].svc.Environment["INBOXD_S3_ENDPOINT"], gws[0])
	require.NoError(t, err)
	require.NotEmpty(t, endpoint, "the gateways keep attachments in an S3 store (INBOXD_S3_ENDPOINT)")

	const alice, bob, mallory = 2001, 2002, 2003
	var conv protocol.ConversationCreated
	code, err := via(alice).do(ctx, "POST", "/v1/conversations",
		protocol.CreateConversation{Title: "attachments", Members: []int64{bob}}, &conv)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	cid := conv.ConversationID

	// More than one chunk, the last one short.
	plain := make([]byte, 3*sealed.ChunkSize+1234)
	_, _ = rand.Read(plain)
	sum := sha256.Sum256(plain)
	var up protocol.Upload
	code, err = via(alice).do(ctx, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid),
		protocol.UploadRequest{Name: "compose.bin", ContentType: "application/octet-stream",
			Size: int64(len(plain)), SHA256: hex.EncodeToString(sum[:])}, &up)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "create an upload through the load balancer")
	require.True(t, strings.HasPrefix(up.URL, endpoint+"/"),
		"the upload URL %s points at the store as clients reach it (%s)", up.URL, endpoint)
	key, err := base64.RawURLEncoding.DecodeString(up.Key)
	require.NoError(t, err)
	var sealedFile bytes.Buffer
	require.NoError(t, sealed.Seal(&sealedFile, bytes.NewReader(plain), int64(len(plain)), key))
	require.Equal(t, up.SealedSize, int64(sealedFile.Len()))

	unsigned, err := url.Parse(up.URL)
	require.NoError(t, err)
	unsigned.RawQuery = ""
	status, _ := fetch(t, ctx, up.Method, unsigned.String(), up.Headers, sealedFile.Bytes())
	require.Equal(t, http.StatusForbidden, status, "the store refuses a PUT without the signature")
	status, body := fetch(t, ctx, up.Method, up.URL, up.Headers, sealedFile.Bytes())
	require.Equal(t, http.StatusOK, status, "PUT the sealed file to the presigned URL: %s", body)
	logf("uploaded %d sealed bytes to the store on a URL presigned through the load balancer", sealedFile.Len())

	var sent protocol.Message
	code, err = via(alice).do(ctx, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		protocol.SendMessage{MsgID: uuid.NewString(), Body: "a file", Attachments: []string{up.ID}}, &sent)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, code, "send with the attachment")

	// Bob's inbox: the message and the attachment's key.
	var att *protocol.Attachment
	var after int64
	for deadline := time.Now().Add(30 * time.Second); att == nil; {
		require.True(t, time.Now().Before(deadline), "bob's sync shows the message with attachment %s", up.ID)
		a := via(bob).sync(ctx, t, after, 10)
		for _, e := range a.Entries {
			if e.Message == nil || e.ConversationID != cid {
				continue
			}
			for i := range e.Message.Attachments {
				if e.Message.Attachments[i].ID == up.ID {
					att = &e.Message.Attachments[i]
				}
			}
		}
		after = a.Head
	}
	require.Equal(t, int64(len(plain)), att.Size)

	path := fmt.Sprintf("/v1/conversations/%d/attachments/%s", cid, up.ID)
	res := noRedirect(t, ctx, via(bob), path)
	require.Equal(t, http.StatusFound, res.StatusCode, "download through the load balancer")
	loc := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, endpoint+"/"), "the download URL %s points at the store as clients reach it (%s)", loc, endpoint)
	status, got := fetch(t, ctx, "GET", loc, nil, nil)
	require.Equal(t, http.StatusOK, status, "GET the presigned download: %s", got)
	require.True(t, bytes.Equal(sealedFile.Bytes(), got), "the store gives back the sealed bytes PUT (%d bytes, got %d)", sealedFile.Len(), len(got))
	bobKey, err := base64.RawURLEncoding.DecodeString(att.Key)
	require.NoError(t, err)
	var opened bytes.Buffer
	require.NoError(t, sealed.Open(&opened, bytes.NewReader(got), att.Size, bobKey), "open with the key of bob's message")
	require.True(t, bytes.Equal(plain, opened.Bytes()), "the file opens to what alice sealed")

	res = noRedirect(t, ctx, via(mallory), path)
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a download by someone who never was a member")
	logf("sent a message with the attachment, downloaded it as bob: 302 to the store, the same %d sealed bytes", len(got))
}

// checkStoreEndpoint: the gateways' INBOXD_S3_ENDPOINT, as the file gives
// it, names the store both for clients on the Docker host and for the
// gateways, since the gateway signs its URLs for that one name and calls
// it too: a loopback name (localhost or *.localhost, RFC 6761) on a port
// the store publishes on the host, which in the gateways' containers is
// the store's service name or network alias, on the same port inside. (The
// test maps every name to 127.0.0.1, so the traffic alone would not tell.)
func checkStoreEndpoint(t *testing.T, cf *composeFile) {
	t.Helper()
	names, err := serviceNames(cf)
	require.NoError(t, err)
	for name, s := range cf.Services {
		if s.repo() != "inboxd" || len(s.Command) == 0 || s.Command[0] != "gateway" {
			continue
		}
		raw := s.Environment["INBOXD_S3_ENDPOINT"]
		require.NotEmpty(t, raw, "service %s keeps attachments in the store (INBOXD_S3_ENDPOINT)", name)
		u, err := url.Parse(raw)
		require.NoError(t, err, "service %s: INBOXD_S3_ENDPOINT %q", name, raw)
		host, port := u.Hostname(), u.Port()
		require.True(t, host == "localhost" || strings.HasSuffix(host, ".localhost"),
			"service %s: INBOXD_S3_ENDPOINT %s: clients on the Docker host resolve its name to the loopback", name, raw)
		store := cf.Services[names[host]]
		require.NotNil(t, store, "service %s: INBOXD_S3_ENDPOINT %s: the gateways resolve %s to a service (its name or a network alias)", name, raw, host)
		published := false
		for _, p := range store.Ports {
			parts := strings.Split(p, ":")
			published = published || (len(parts) >= 2 && parts[len(parts)-2] == port && parts[len(parts)-1] == port)
		}
		require.True(t, published, "service %s: INBOXD_S3_ENDPOINT %s: service %s publishes port %s on the host, as %s inside (ports %v)",
			name, raw, store.name, port, port, store.Ports)
	}
}

// fetch makes one request to the store, as a client would on a presigned
// URL, and returns its status and body.
func fetch(t *testing.T, ctx context.Context, method, u string, headers map[string]string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	require.NoError(t, err)
	if body == nil {
		req.Body = nil
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err, "%s %s", method, u)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, raw
}

// noRedirect is c's GET of path, its redirect not followed.
func noRedirect(t *testing.T, ctx context.Context, c *apiClient, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	hc := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Do(req)
	require.NoError(t, err, "GET %s via %s", path, c.name)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}
