//! System calls: spans from entry to exit, and what they do to fds and connections.

use super::*;

impl Timeline {
    #[inline]
    pub(super) fn sys_enter(&mut self, m: &Merged, nr: u32, arg0: u64, arg2: u64) {
        let t = m.time;
        let r = self.acting(m);
        if let Some(open) = self.rt[r as usize].sys.take() {
            self.stats.syscalls_without_exit += 1;
            self.close_sys(r, open, t, Some(m.cpu), SpanEnd::Unwound);
        }
        let class = sysclass::class(nr);
        // The fd is a C int: the low 32 bits of the register.
        let fd = class.fd_arg.then_some(arg0 as u32 as i32);
        let proc_ = self.threads[r as usize].process;
        let entry = fd.and_then(|fd| self.fds.get(&key(proc_, fd as u32)).copied());
        if let (Some(fd), true) = (fd, class.close) {
            // close frees the number before it returns: another thread's accept
            // may get it back before this close's exit is seen.
            self.fds.remove(&key(proc_, fd as u32));
        }
        let conn = entry.map(|e| e.conn).filter(|&c| c != 0);
        let socket = entry.is_some_and(|e| e.socket);
        let sock_op = class.sock.or(match () {
            _ if !socket => None,
            _ if class.reads => Some(SockOp::Recv),
            _ if class.writes => Some(SockOp::Send),
            _ if class.close => Some(SockOp::Close),
            _ => None,
        });
        let open = OpenSys {
            nr,
            begin: t,
            cpu: m.cpu,
            fd,
            requested: arg2,
            sock_op,
            conn,
        };
        self.rt[r as usize].sys = Some(open);
        self.out.push(Item::SyscallEntry(SyscallEntry {
            thread: r,
            time: t,
            cpu: m.cpu,
            nr,
            fd,
            requested: arg2,
            sock_op,
            conn,
        }));
    }

    /// An exit record: it closes the open call of the same number; one of another number
    /// lost its exit, and this exit its entry.
    #[inline]
    pub(super) fn sys_exit_record(&mut self, m: &Merged, nr: u32, ret: i64) {
        let t = m.time;
        let r = self.acting(m);
        let open = match self.rt[r as usize].sys.take() {
            Some(o) if o.nr == nr => Some(o),
            Some(o) => {
                self.stats.syscalls_without_exit += 1;
                self.close_sys(r, o, t, Some(m.cpu), SpanEnd::Unwound);
                None
            }
            None => None,
        };
        self.sys_exit(r, nr, open, ret, m);
    }

    pub(super) fn sys_exit(
        &mut self,
        r: ThreadRef,
        nr: u32,
        open: Option<OpenSys>,
        ret: i64,
        m: &Merged,
    ) {
        let t = m.time;
        let class = sysclass::class(nr);
        let meta = &self.threads[r as usize];
        let proc_ = meta.process;
        let (entered, o) = match open {
            Some(o) => (true, o),
            None => {
                self.stats.syscall_exits_without_entry += 1;
                let o = OpenSys {
                    nr,
                    begin: meta.first_seen.min(t),
                    cpu: m.cpu,
                    fd: None,
                    requested: 0,
                    sock_op: class.sock,
                    conn: None,
                };
                (false, o)
            }
        };
        let (new_conn, replaced_conn) = match ret {
            0.. => self.opened(r, proc_, class.new_fd, ret as u32, t, m.cpu),
            _ => (None, None),
        };
        if let Some(fd) = o.fd {
            // (close gave its number up at its entry.)
            if o.sock_op == Some(SockOp::Connect) {
                let e = self.fds.entry(key(proc_, fd as u32));
                e.or_insert(FdEntry {
                    socket: true,
                    conn: 0,
                });
            }
        }
        let bytes_read = if class.reads && ret > 0 {
            ret as u64
        } else {
            0
        };
        let bytes_written = if class.writes && ret > 0 {
            ret as u64
        } else {
            0
        };
        if let Some(c) = o.conn {
            self.handed_off(c, r, &o, class.close, bytes_read + bytes_written);
        }
        self.out.push(Item::Syscall(SyscallSpan {
            thread: r,
            nr,
            begin: o.begin,
            end: t,
            entered,
            cpu: Some(m.cpu),
            fd: o.fd,
            requested: o.requested,
            ret: Some(ret),
            bytes_read,
            bytes_written,
            sock_op: o.sock_op,
            conn: o.conn,
            new_conn,
            replaced_conn,
            end_kind: SpanEnd::Returned,
        }));
    }

    /// A call that returned `fd`, a new descriptor of kind `new_fd` (an accepted
    /// connection, a socket, anything else) in process `proc_`: the number's old
    /// connection is over, and an accepted one starts, pending its hand-off. Returns the
    /// new connection and the replaced one.
    #[inline(always)]
    fn opened(
        &mut self,
        r: ThreadRef,
        proc_: u32,
        new_fd: Option<NewFd>,
        fd: u32,
        t: u64,
        cpu: u32,
    ) -> (Option<u32>, Option<u32>) {
        let Some(new_fd) = new_fd else {
            return (None, None);
        };
        let newkey = key(proc_, fd);
        let replaced_conn = self.forget_fd(newkey);
        let new_conn = match new_fd {
            NewFd::Accepted => {
                let id = self.next_conn;
                self.next_conn = self.next_conn.wrapping_add(1).max(1);
                self.stats.connections += 1;
                let e = FdEntry {
                    socket: true,
                    conn: id,
                };
                self.fds.insert(newkey, e);
                let p = Pending {
                    from: r,
                    send: t,
                    cpu,
                };
                self.handoffs.insert(id, p);
                Some(id)
            }
            NewFd::Socket => {
                let e = FdEntry {
                    socket: true,
                    conn: 0,
                };
                self.fds.insert(newkey, e);
                None
            }
            NewFd::Other => None,
        };
        (new_conn, replaced_conn)
    }

    /// A call of thread `r` on connection `c`: when another thread accepted it, the
    /// connection's hand-off, a link from the accepting thread to this call; a close of
    /// its own ends the wait for one.
    #[inline(always)]
    fn handed_off(&mut self, c: u32, r: ThreadRef, o: &OpenSys, close: bool, bytes: u64) {
        let Some(p) = self.handoffs.get(&c).copied() else {
            return;
        };
        if p.from != r {
            self.stats.handoff_links += 1;
            self.out.push(Item::Link(Link {
                kind: LinkKind::Handoff { conn: c },
                from: p.from,
                send: p.send,
                send_cpu: p.cpu,
                to: r,
                recv: o.begin.max(p.send),
                recv_cpu: o.cpu,
                bytes,
            }));
            self.handoffs.remove(&c);
        } else if close {
            self.handoffs.remove(&c);
        }
    }

    /// The fd number is reused: whatever connection it held is over (a close not seen,
    /// e.g. lost, must not leave the connection pending for ever). Returns that
    /// connection.
    pub(super) fn forget_fd(&mut self, k: u64) -> Option<u32> {
        let conn = self.fds.remove(&k).map(|e| e.conn).filter(|&c| c != 0)?;
        self.handoffs.remove(&conn);
        Some(conn)
    }

    pub(super) fn close_sys(
        &mut self,
        r: ThreadRef,
        o: OpenSys,
        t: u64,
        cpu: Option<u32>,
        kind: SpanEnd,
    ) {
        if let (Some(c), true) = (o.conn, sysclass::class(o.nr).close) {
            // A pending hand-off holds the output back: the connection is over.
            self.handoffs.remove(&c);
        }
        self.out.push(Item::Syscall(SyscallSpan {
            thread: r,
            nr: o.nr,
            begin: o.begin,
            end: t,
            entered: true,
            cpu,
            fd: o.fd,
            requested: o.requested,
            ret: None,
            bytes_read: 0,
            bytes_written: 0,
            sock_op: o.sock_op,
            conn: o.conn,
            new_conn: None,
            replaced_conn: None,
            end_kind: kind,
        }));
    }
}
