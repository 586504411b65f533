package safety

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ahrtr/disco/zkio"
)

// expireSession makes the server at addr end the session s holds, as
// ZooKeeper's own tests do: it opens a second connection with the
// session's id and password and closes the session on it. The session's
// own client learns it as an expiry when it next reaches a server.
//
// Taking the session up on a second connection makes the server drop the
// client's, and the client reconnects at once, taking it back: the server
// then drops the second connection, and a close sent on it may go
// unanswered (EOF), done or not. So a close cut off is tried again on a
// new connection, until one is answered or the server says the session is
// gone.
func expireSession(addr string, s *zkio.Session) error {
	const attempts = 10
	var err error
	for attempt := range attempts {
		var gone bool
		gone, err = closeSession(addr, s)
		switch {
		case err == nil:
			return nil
		case gone && attempt > 0:
			return nil // a close cut off before its reply ended it
		case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET):
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond) // a retry's backoff
	}
	return fmt.Errorf("%d tries: %w", attempts, err)
}

// closeSession is one try of expireSession; gone reports that the server
// did not take the session up (it has ended).
func closeSession(addr string, s *zkio.Session) (gone bool, err error) {
	id := s.SessionID()
	passwd := sessionPassword(id)
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// ConnectRequest: protocol version, last zxid seen, timeout (ms),
	// session id, password (length-prefixed).
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(s.Timeout().Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writeFrame(c, req); err != nil {
		return false, err
	}
	resp, err := readFrame(c)
	if err != nil {
		return false, fmt.Errorf("connect with session %#x: %w", id, err)
	}
	// ConnectResponse: protocol version, timeout, session id, password.
	if len(resp) < 16 || binary.BigEndian.Uint32(resp[4:]) == 0 || int64(binary.BigEndian.Uint64(resp[8:])) != id {
		return true, fmt.Errorf("session %#x: the server did not take it up (already expired?)", id)
	}
	// closeSession: xid 1, opcode -11.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xffffffff-11+1))
	if err := writeFrame(c, closeReq); err != nil {
		return false, err
	}
	reply, err := readFrame(c)
	if err != nil {
		return false, fmt.Errorf("close session %#x: %w", id, err)
	}
	if len(reply) < 16 {
		return false, fmt.Errorf("close session %#x: short reply", id)
	}
	if code := int32(binary.BigEndian.Uint32(reply[12:])); code != 0 {
		return false, fmt.Errorf("close session %#x: error %d", id, code)
	}
	return false, nil
}

func writeFrame(w io.Writer, b []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, errors.New("frame too large")
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// sessionPassword returns the password the ensemble gave session id. A
// ZooKeeper server derives it from the id alone (ZooKeeperServer's
// generatePasswd: sixteen bytes of java.util.Random seeded with the id xor
// 0xB3415C00) and checks a reconnection's password against the same
// derivation. Deriving it here leaves the client's copy alone: the client
// writes it on every reconnection, on its own goroutine, and a read of it
// from the test would race with that write.
func sessionPassword(id int64) []byte {
	// java.util.Random: a 48-bit linear congruential generator; nextBytes
	// takes each 32-bit output low byte first.
	const mult, inc, mask = 0x5DEECE66D, 0xB, 1<<48 - 1
	seed := (id ^ 0xB3415C00 ^ mult) & mask
	p := make([]byte, 16)
	for i := 0; i < len(p); {
		seed = (seed*mult + inc) & mask
		r := uint32(seed >> 16)
		for n := min(len(p)-i, 4); n > 0; n-- {
			p[i], r, i = byte(r), r>>8, i+1
		}
	}
	return p
}
