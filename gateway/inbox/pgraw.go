package inbox

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Decoding of raw integer columns and one-dimensional integer arrays as
// PostgreSQL sends them, without the reflection of Scan: the hot path of
// the inbox read.

// rawInts decodes a row of integer columns (NULL allowed) without the
// reflection of Scan: binary int2/int4/int8, or text.
func rawInts(fds []pgconn.FieldDescription, raw [][]byte, v []int64, null []bool) error {
	if len(raw) != len(v) {
		return fmt.Errorf("%d columns, want %d", len(raw), len(v))
	}
	for i, b := range raw {
		if b == nil {
			v[i], null[i] = 0, true
			continue
		}
		null[i] = false
		if fds[i].Format == pgx.BinaryFormatCode {
			switch len(b) {
			case 2:
				v[i] = int64(int16(binary.BigEndian.Uint16(b)))
			case 4:
				v[i] = int64(int32(binary.BigEndian.Uint32(b)))
			case 8:
				v[i] = int64(binary.BigEndian.Uint64(b))
			default:
				return fmt.Errorf("column %s: %d bytes is no integer", fds[i].Name, len(b))
			}
			continue
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("column %s: %w", fds[i].Name, err)
		}
		v[i] = n
	}
	return nil
}

// rawIntArray decodes a one-dimensional integer array without NULL
// elements (binary int2[]/int4[]/int8[], or text), appending to dst. A NULL
// array is empty.
func rawIntArray(fd pgconn.FieldDescription, b []byte, dst []int64) ([]int64, error) {
	if b == nil {
		return dst, nil
	}
	if fd.Format != pgx.BinaryFormatCode {
		s := string(b)
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return nil, fmt.Errorf("column %s: %q is no array", fd.Name, s)
		}
		if s = s[1 : len(s)-1]; s == "" {
			return dst, nil
		}
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", fd.Name, err)
			}
			dst = append(dst, n)
		}
		return dst, nil
	}
	be := binary.BigEndian
	if len(b) < 12 {
		return nil, fmt.Errorf("column %s: short array", fd.Name)
	}
	ndim := be.Uint32(b)
	if ndim == 0 {
		return dst, nil
	}
	if ndim != 1 || len(b) < 20 {
		return nil, fmt.Errorf("column %s: array of %d dimensions", fd.Name, ndim)
	}
	n := int(be.Uint32(b[12:]))
	b = b[20:]
	for range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("column %s: short array", fd.Name)
		}
		l := int(int32(be.Uint32(b)))
		b = b[4:]
		if l < 0 || len(b) < l {
			return nil, fmt.Errorf("column %s: NULL or short element", fd.Name)
		}
		switch l {
		case 2:
			dst = append(dst, int64(int16(be.Uint16(b))))
		case 4:
			dst = append(dst, int64(int32(be.Uint32(b))))
		case 8:
			dst = append(dst, int64(be.Uint64(b)))
		default:
			return nil, fmt.Errorf("column %s: %d-byte element", fd.Name, l)
		}
		b = b[l:]
	}
	return dst, nil
}
