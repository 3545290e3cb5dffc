package chaos

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Port is a listening socket on 127.0.0.1 that outlives the servers that
// serve on it, so that a server can go down and come back on the same
// address, as a restarted process does, without the port passing to
// another process in between: on a busy machine a port given up for a
// moment is soon some other connection's, and the server cannot bind it
// again. While no server serves on it, the Port accepts connections and
// resets them at once, which callers see as a server that is down. Its
// methods are safe for concurrent use.
type Port struct {
	lis  net.Listener
	done chan struct{} // closed when the accept loop has ended

	mu  sync.Mutex
	cur *portListener // the serving server's listener; nil while down
}

// ListenPort listens on a free port of 127.0.0.1.
func ListenPort() (*Port, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Port{lis: lis, done: make(chan struct{})}
	go p.accept()
	return p, nil
}

// Addr returns the port's address.
func (p *Port) Addr() string { return p.lis.Addr().String() }

// Listener returns the listener of the next server to serve on p; the
// server takes the connections p accepts until it closes the listener, as
// it does when it stops. Closing it leaves p open.
func (p *Port) Listener() net.Listener {
	l := &portListener{p: p, conns: make(chan net.Conn), closed: make(chan struct{})}
	p.mu.Lock()
	if p.cur != nil {
		p.cur.closeLocked()
	}
	p.cur = l
	p.mu.Unlock()
	return l
}

// Close closes the socket, and with it the listener of the server still
// serving, if any.
func (p *Port) Close() error {
	err := p.lis.Close()
	<-p.done
	p.mu.Lock()
	if p.cur != nil {
		p.cur.closeLocked()
	}
	p.mu.Unlock()
	return err
}

func (p *Port) accept() {
	defer close(p.done)
	for {
		c, err := p.lis.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors, say: wait and go on
			time.Sleep(time.Millisecond)
			continue
		}
		p.mu.Lock()
		l := p.cur
		p.mu.Unlock()
		if l == nil || !l.deliver(c) {
			reset(c)
		}
	}
}

// reset closes c with a TCP reset, as a port nobody listens on answers a
// connection with one.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// portListener is one server's view of a Port.
type portListener struct {
	p      *Port
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// deliver hands c to the server, unless it stops first.
func (l *portListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *portListener) Close() error {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *portListener) closeLocked() {
	l.once.Do(func() { close(l.closed) })
	if l.p.cur == l {
		l.p.cur = nil
	}
}

func (l *portListener) Addr() net.Addr { return l.p.lis.Addr() }
