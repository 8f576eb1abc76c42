package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"
)

// rawConn is a lean HTTP/1.1 client of one keep-alive connection, for load
// generators that must cost little CPU next to the server they measure
// (net/http's client took about twice its CPU per request in the load
// generator of `inboxd-bench sync`). One goroutine
// owns it and sends one GET at a time (closed loop). The request is
// appended into a reused buffer and the answer read with a reused
// bufio.Reader; a body is delimited by Content-Length or chunked, and is
// either kept in a reused buffer or discarded while counted. A body that
// ends only with the connection is refused.
//
// A failed request closes the connection, and so does an answer with
// Connection: close (or an HTTP/1.0 one without keep-alive); the next
// request dials again. As net/http does, a request on a reused connection
// that the server had closed before answering anything is sent once more on
// a new one.
type rawConn struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	addr    string        // host:port, also the Host header
	timeout time.Duration // bounds a dial, and a request and its answer

	conn     net.Conn
	stop     func() bool // ends the context.AfterFunc that closes conn
	br       *bufio.Reader
	deadline time.Time // conn's deadline
	reused   bool      // conn has answered a request already
	req      []byte
	body     []byte
	dials    int
}

// rawResp is an answer. Body aliases the connection's buffer: it is valid
// until the next request.
type rawResp struct {
	Status int
	Body   []byte // the body, when asked for
	N      int64  // body bytes (de-chunked)
	Close  bool   // the connection ends after this answer
}

const (
	rawMaxHeaderLines = 128
	rawMaxBody        = 64 << 20
)

func newRawConn(dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, timeout time.Duration) *rawConn {
	return &rawConn{dial: dial, addr: addr, timeout: timeout, req: make([]byte, 0, 1024)}
}

// get sends GET path with the bearer token (and If-None-Match: etag unless
// etag is empty) and reads the answer; keepBody keeps the body in Body.
func (c *rawConn) get(ctx context.Context, path []byte, token, etag string, keepBody bool) (rawResp, error) {
	return c.do(ctx, "GET", path, token, etag, nil, keepBody)
}

// post sends POST path with a JSON body. It is retried on a new connection
// as get is, so it suits idempotent requests only (a send with its msg_id).
func (c *rawConn) post(ctx context.Context, path []byte, token string, body []byte) (rawResp, error) {
	return c.do(ctx, "POST", path, token, "", body, false)
}

func (c *rawConn) do(ctx context.Context, method string, path []byte, token, etag string, body []byte, keepBody bool) (rawResp, error) {
	c.req = append(c.req[:0], method...)
	c.req = append(c.req, ' ')
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.addr...)
	c.req = append(c.req, "\r\nAuthorization: Bearer "...)
	c.req = append(c.req, token...)
	if etag != "" {
		c.req = append(c.req, "\r\nIf-None-Match: "...)
		c.req = append(c.req, etag...)
	}
	if body != nil {
		c.req = append(c.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
		c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	}
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	for {
		if c.conn == nil {
			if err := c.connect(ctx); err != nil {
				return rawResp{}, err
			}
		}
		// Refreshing the deadline only when a quarter of it has passed
		// spares a timer update per request: a request has at least 3/4 of
		// timeout.
		if now := time.Now(); c.deadline.Sub(now) < c.timeout*3/4 {
			c.deadline = now.Add(c.timeout)
			if err := c.conn.SetDeadline(c.deadline); err != nil {
				c.close()
				return rawResp{}, err
			}
		}
		retry := c.reused
		_, err := c.conn.Write(c.req)
		wrote := err == nil
		var resp rawResp
		silent := false
		if wrote {
			resp, silent, err = c.readResponse(keepBody)
		}
		if err != nil {
			c.close()
			if retry && (!wrote || silent) && !isTimeout(err) && ctx.Err() == nil {
				continue // the server had closed the idle connection
			}
			return rawResp{}, fmt.Errorf("%s http://%s%s: %w", method, c.addr, path, err)
		}
		c.reused = true
		if resp.Close {
			c.close()
		}
		return resp, nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *rawConn) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	conn, err := c.dial(dctx, "tcp", c.addr)
	cancel()
	if err != nil {
		return err
	}
	c.dials++
	c.conn, c.reused, c.deadline = conn, false, time.Time{}
	// A request in flight when ctx ends fails at once.
	c.stop = context.AfterFunc(ctx, func() { _ = conn.Close() })
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	return nil
}

func (c *rawConn) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn = nil
}

// readResponse reads one answer. silent is true when the connection ended
// before its first byte.
func (c *rawConn) readResponse(keepBody bool) (resp rawResp, silent bool, err error) {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			if len(line) == 0 && c.br.Buffered() == 0 {
				return resp, true, err
			}
			return resp, false, fmt.Errorf("read status line: %w", noEOF(err))
		}
		line = trimEOL(line)
		// HTTP/1.x SSS[ reason]
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
			(len(line) > 12 && line[12] != ' ') {
			return resp, false, fmt.Errorf("malformed status line %q", line)
		}
		http10 := line[7] == '0'
		status, ok := atoiDigits(line[9:12])
		if !ok {
			return resp, false, fmt.Errorf("malformed status line %q", line)
		}
		resp = rawResp{Status: status, Close: http10}
		length, chunked, keepAlive, err := c.readHeaders(&resp)
		if err != nil {
			return resp, false, err
		}
		if http10 && keepAlive {
			resp.Close = false
		}
		switch {
		case status == 101:
			return resp, false, errors.New("unexpected 101 Switching Protocols")
		case status < 200:
			continue // 100 Continue, 103 Early Hints: the answer follows.
		case status == 204 || status == 304:
			return resp, false, nil
		case chunked:
			err = c.readChunked(&resp, keepBody)
		case length >= 0:
			err = c.readBody(&resp, length, keepBody)
		default:
			err = fmt.Errorf("HTTP %d without Content-Length nor chunked body (a body delimited by the end of the connection is not supported)", status)
		}
		return resp, false, err
	}
}

// readHeaders reads the header lines up to the empty one. length is -1
// without Content-Length.
func (c *rawConn) readHeaders(resp *rawResp) (length int64, chunked, keepAlive bool, err error) {
	length = -1
	for n := 0; ; n++ {
		if n > rawMaxHeaderLines {
			return length, chunked, keepAlive, fmt.Errorf("more than %d header lines", rawMaxHeaderLines)
		}
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return length, chunked, keepAlive, fmt.Errorf("header line longer than %d bytes", c.br.Size())
			}
			return length, chunked, keepAlive, fmt.Errorf("read headers: %w", noEOF(err))
		}
		line = trimEOL(line)
		if len(line) == 0 {
			return length, chunked, keepAlive, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return length, chunked, keepAlive, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, ok := atoiDigits(value)
			if !ok || v > rawMaxBody || (length >= 0 && int64(v) != length) {
				return length, chunked, keepAlive, fmt.Errorf("bad Content-Length %q", value)
			}
			length = int64(v)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return length, chunked, keepAlive, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				if bytes.EqualFold(tok, []byte("close")) {
					resp.Close = true
				} else if bytes.EqualFold(tok, []byte("keep-alive")) {
					keepAlive = true
				}
			}
		}
	}
}

// readBody reads n body bytes, kept or discarded.
func (c *rawConn) readBody(resp *rawResp, n int64, keep bool) error {
	if keep {
		c.body = slices.Grow(c.body[:0], int(n))[:n]
		if _, err := io.ReadFull(c.br, c.body); err != nil {
			return fmt.Errorf("read body of %d bytes: %w", n, noEOF(err))
		}
		resp.Body = c.body
	} else if m, err := c.br.Discard(int(n)); err != nil {
		return fmt.Errorf("read body: %d of %d bytes: %w", m, n, noEOF(err))
	}
	resp.N = n
	return nil
}

// readChunked reads a chunked body and its trailers.
func (c *rawConn) readChunked(resp *rawResp, keep bool) error {
	c.body = c.body[:0]
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read chunk size: %w", noEOF(err))
		}
		line = trimEOL(line)
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		size, ok := hexDigits(bytes.TrimSpace(line))
		if !ok || resp.N+size > rawMaxBody {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if size == 0 {
			break
		}
		if keep {
			l := len(c.body)
			c.body = slices.Grow(c.body, int(size))[:l+int(size)]
			if _, err := io.ReadFull(c.br, c.body[l:]); err != nil {
				return fmt.Errorf("read chunk: %w", noEOF(err))
			}
		} else if _, err := c.br.Discard(int(size)); err != nil {
			return fmt.Errorf("read chunk: %w", noEOF(err))
		}
		resp.N += size
		if line, err = c.br.ReadSlice('\n'); err != nil || len(trimEOL(line)) != 0 {
			if err == nil {
				err = fmt.Errorf("%q after a chunk instead of CRLF", line)
			}
			return fmt.Errorf("read chunk end: %w", noEOF(err))
		}
	}
	if keep {
		resp.Body = c.body
	}
	// Trailers, up to the empty line.
	for n := 0; ; n++ {
		line, err := c.br.ReadSlice('\n')
		if err != nil || n > rawMaxHeaderLines {
			if err == nil {
				err = errors.New("too many trailer lines")
			}
			return fmt.Errorf("read trailers: %w", noEOF(err))
		}
		if len(trimEOL(line)) == 0 {
			return nil
		}
	}
}

// noEOF turns io.EOF, the end of the connection within an answer, into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// atoiDigits parses 1 to 18 decimal digits.
func atoiDigits(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}

// hexDigits parses 1 to 15 hexadecimal digits.
func hexDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		switch {
		case d >= '0' && d <= '9':
			d -= '0'
		case d >= 'a' && d <= 'f':
			d -= 'a' - 10
		case d >= 'A' && d <= 'F':
			d -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}
