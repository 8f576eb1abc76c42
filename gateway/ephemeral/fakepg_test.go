package ephemeral

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// fakePG is PostgreSQL for a Service without PostgreSQL: a *pgxpool.Pool
// (what New takes) whose connections are in-memory pipes to a server that
// speaks the wire protocol's startup, simple queries (transactions) and
// extended queries, and answers each statement of this package, known by
// its text, from a world (world_test.go). The pool runs in
// QueryExecModeExec, so that parameters and results travel as text.
type fakePG struct {
	t *testing.T
	w *world
}

// result is a statement's answer: its columns' types, its rows, its
// command tag; err makes it an ErrorResponse.
type result struct {
	cols []uint32
	rows [][]any
	tag  string
	err  error
}

func newPool(t *testing.T, w *world) *pgxpool.Pool {
	t.Helper()
	f := &fakePG{t: t, w: w}
	cfg, err := pgxpool.ParseConfig("postgres://test@fake:5432/test?sslmode=disable")
	require.NoError(t, err)
	cc := cfg.ConnConfig
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"fake"}, nil }
	cc.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server)
		return client, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// serve is one connection.
func (f *fakePG) serve(nc net.Conn) {
	defer nc.Close()
	be := pgproto3.NewBackend(nc, nc)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "17.0"})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	tx := byte('I')
	cs := &connState{}
	var sql string
	var params [][]byte
	var res *result
	failed := false // an error: skip to the Sync
	m := pgtype.NewMap()
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		switch msg := msg.(type) {
		case *pgproto3.Query:
			switch msg.String {
			case "begin", "commit", "rollback":
				f.w.note(msg.String, cs)
			}
			switch msg.String {
			case "begin":
				tx = 'T'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
			case "commit":
				tx = 'I'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("COMMIT")})
			case "rollback":
				tx = 'I'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("ROLLBACK")})
			default: // the pool's ping
				be.Send(&pgproto3.EmptyQueryResponse{})
			}
			be.Send(&pgproto3.ReadyForQuery{TxStatus: tx})
		case *pgproto3.Parse:
			if !failed {
				sql, res = msg.Query, nil
				be.Send(&pgproto3.ParseComplete{})
			}
		case *pgproto3.Bind:
			if !failed {
				params = nil
				for _, p := range msg.Parameters {
					params = append(params, append([]byte(nil), p...)) // the message's buffer is reused
				}
				be.Send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Describe:
			if failed {
				break
			}
			res = f.w.run(f.t, sql, params, cs)
			if res.err != nil {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX000", Message: res.err.Error()})
				failed = true
				if tx == 'T' {
					tx = 'E'
				}
				break
			}
			if len(res.cols) == 0 {
				be.Send(&pgproto3.NoData{})
				break
			}
			fields := make([]pgproto3.FieldDescription, len(res.cols))
			for i, oid := range res.cols {
				fields[i] = pgproto3.FieldDescription{Name: []byte("c" + strconv.Itoa(i)), DataTypeOID: oid, DataTypeSize: -1, TypeModifier: -1}
			}
			be.Send(&pgproto3.RowDescription{Fields: fields})
		case *pgproto3.Execute:
			if failed || res == nil {
				break
			}
			for _, row := range res.rows {
				vals := make([][]byte, len(row))
				for i, v := range row {
					if v == nil {
						continue
					}
					b, err := m.Encode(res.cols[i], pgtype.TextFormatCode, v, nil)
					if err != nil {
						panic(fmt.Sprintf("fakePG: encode %T as %d: %v", v, res.cols[i], err))
					}
					vals[i] = b
				}
				be.Send(&pgproto3.DataRow{Values: vals})
			}
			tag := res.tag
			if tag == "" {
				tag = "SELECT " + strconv.Itoa(len(res.rows))
			}
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
		case *pgproto3.Sync:
			failed = false
			be.Send(&pgproto3.ReadyForQuery{TxStatus: tx})
		case *pgproto3.Terminate:
			return
		}
		if be.Flush() != nil {
			return
		}
	}
}

// connState is what a connection holds between statements: the
// notifications of its open transaction, delivered at its commit (as
// PostgreSQL does).
type connState struct {
	inTx    bool
	pending []string
}

// The text parameters of a statement.

func argInt(b []byte) int64 {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

func argFloat(b []byte) float64 {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		panic(err)
	}
	return v
}

func argInts(b []byte) []int64 {
	var v []int64
	if err := pgtype.NewMap().Scan(pgtype.Int8ArrayOID, pgtype.TextFormatCode, b, &v); err != nil {
		panic(err)
	}
	return v
}

func argTime(b []byte) (v pgtype.Timestamptz) {
	if err := pgtype.NewMap().Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, b, &v); err != nil {
		panic(err)
	}
	return v
}

// Column types of results.
const (
	boolCol = pgtype.BoolOID
	intCol  = pgtype.Int8OID
	intsCol = pgtype.Int8ArrayOID
	textCol = pgtype.TextOID
	timeCol = pgtype.TimestamptzOID
)
