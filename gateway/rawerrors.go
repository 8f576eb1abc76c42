package gateway

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"

	"github.com/inboxd/inboxd/protocol"
)

// jsonErrorListener wraps the listener of Serve so that the answers
// net/http writes by itself, before any handler runs, come in the error
// shape like every other answer: a request header over
// 2*Config.MaxHeaderBytes (431; below that the handler answers), a header
// net/http cannot parse or an invalid header value, such as a NUL (400).
// net/http writes such an answer straight to the connection in one write,
// as "HTTP/1.1 <status line>" + plainHeaders + "<status line>", then
// closes; a write of exactly that form is replaced. No answer of a handler
// has that form (ours carry a Content-Length or are chunked, and JSON).
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return jsonErrorConn{c}, nil
}

type jsonErrorConn struct{ net.Conn }

// plainHeaders are the header lines of net/http's own error answers.
const plainHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c jsonErrorConn) Write(b []byte) (int, error) {
	if rep := rewritePlainError(b); rep != nil {
		if _, err := c.Conn.Write(rep); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// rewritePlainError returns the error-shape answer that replaces b when b is
// one of net/http's plain-text 4xx answers, else nil.
func rewritePlainError(b []byte) []byte {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(b, []byte(proto)) || len(b) > 1024 {
		return nil
	}
	line, body, ok := bytes.Cut(b[len(proto):], []byte(plainHeaders))
	if !ok || !bytes.Equal(line, body) || len(line) < 4 || line[3] != ' ' {
		return nil
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 499 {
		return nil
	}
	e := protocol.ErrorDetail{Code: protocol.CodeBadRequest, Message: "malformed request: " + string(line)}
	if status == http.StatusRequestHeaderFieldsTooLarge {
		e = protocol.ErrorDetail{Code: protocol.CodeHeaderTooLarge, Message: "request header over the server's limit"}
	} else {
		status = http.StatusBadRequest
	}
	js, _ := json.Marshal(protocol.ErrorBody{Error: e})
	js = append(js, '\n')
	out := []byte(proto + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: application/json; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(js)) + "\r\n\r\n")
	return append(out, js...)
}
