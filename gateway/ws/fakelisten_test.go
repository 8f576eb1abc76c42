package ws

import (
	"context"
	"net"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// fakeListen is the hub's LISTEN connection without PostgreSQL: connect
// (what hub.Run takes) opens a *pgx.Conn to an in-process server that
// speaks just enough of the wire protocol (startup, simple queries) and
// sends the notifications a test hands to notify, as PostgreSQL would
// deliver a NOTIFY of the projector.
type fakeListen struct {
	mu        sync.Mutex
	backends  []*fakeBackend
	listening chan string // each LISTEN's channel
}

type fakeBackend struct {
	mu sync.Mutex // serialises writes: the reader's replies and notify
	be *pgproto3.Backend
	nc net.Conn
}

func newFakeListen() *fakeListen {
	return &fakeListen{listening: make(chan string, 16)}
}

// connect dials the fake server over an in-memory pipe.
func (f *fakeListen) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("postgres://test@fake:5432/test?sslmode=disable")
	if err != nil {
		return nil, err
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"fake"}, nil }
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server)
		return client, nil
	}
	return pgx.ConnectConfig(ctx, cfg)
}

func (f *fakeListen) serve(nc net.Conn) {
	defer nc.Close()
	b := &fakeBackend{be: pgproto3.NewBackend(nc, nc), nc: nc}
	if _, err := b.be.ReceiveStartupMessage(); err != nil {
		return
	}
	b.send(&pgproto3.AuthenticationOk{}, &pgproto3.ParameterStatus{Name: "server_version", Value: "17.0"},
		&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"}, &pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"},
		&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	for {
		msg, err := b.be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			if ch, ok := strings.CutPrefix(m.String, "LISTEN "); ok {
				b.send(&pgproto3.CommandComplete{CommandTag: []byte("LISTEN")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
				f.mu.Lock()
				f.backends = append(f.backends, b)
				f.mu.Unlock()
				f.listening <- strings.Trim(ch, `"`)
				continue
			}
			if m.String == "SELECT epoch FROM meta" { // the hub reads the server's epoch
				b.send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("epoch"), DataTypeOID: 20, DataTypeSize: 8, TypeModifier: -1}}},
					&pgproto3.DataRow{Values: [][]byte{[]byte("1")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
					&pgproto3.ReadyForQuery{TxStatus: 'I'})
				continue
			}
			b.send(&pgproto3.EmptyQueryResponse{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		}
	}
}

func (b *fakeBackend) send(msgs ...pgproto3.BackendMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		b.be.Send(m)
	}
	_ = b.be.Flush()
}

// notify delivers payload on channel to every listening connection.
func (f *fakeListen) notify(channel, payload string) {
	f.mu.Lock()
	bs := append([]*fakeBackend(nil), f.backends...)
	f.mu.Unlock()
	for _, b := range bs {
		b.send(&pgproto3.NotificationResponse{PID: 1, Channel: channel, Payload: payload})
	}
}

// drop cuts every listening connection (the LISTEN connection lost).
func (f *fakeListen) drop() {
	f.mu.Lock()
	bs := f.backends
	f.backends = nil
	f.mu.Unlock()
	for _, b := range bs {
		_ = b.nc.Close()
	}
}
