//! What the x86_64 system calls mean for the timeline: which take an fd as first
//! argument, which move bytes in which direction, which are socket operations and which
//! return a new fd. Numbers are from the kernel's unistd_64.h (checked against
//! `tracer_abi::syscalls` by a test).

/// A socket-level operation, as shown in the Paraver trace (event type 40000004).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SockOp {
    /// accept, accept4.
    Accept = 1,
    /// connect.
    Connect = 2,
    /// A write to a socket (write, send, sendto, sendmsg...).
    Send = 3,
    /// A read from a socket (read, recv, recvfrom, recvmsg...).
    Recv = 4,
    /// close of a socket.
    Close = 5,
    /// socket.
    Socket = 6,
    /// shutdown.
    Shutdown = 7,
    /// listen.
    Listen = 8,
    /// bind.
    Bind = 9,
}

impl SockOp {
    /// Every operation, in value order.
    pub const ALL: [SockOp; 9] = [
        SockOp::Accept,
        SockOp::Connect,
        SockOp::Send,
        SockOp::Recv,
        SockOp::Close,
        SockOp::Socket,
        SockOp::Shutdown,
        SockOp::Listen,
        SockOp::Bind,
    ];

    /// A lowercase label.
    pub fn label(self) -> &'static str {
        match self {
            SockOp::Accept => "accept",
            SockOp::Connect => "connect",
            SockOp::Send => "send",
            SockOp::Recv => "recv",
            SockOp::Close => "close",
            SockOp::Socket => "socket",
            SockOp::Shutdown => "shutdown",
            SockOp::Listen => "listen",
            SockOp::Bind => "bind",
        }
    }
}

/// What a new fd returned by a system call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewFd {
    /// An accepted connection: gets a connection id.
    Accepted,
    /// Some other socket (`socket`).
    Socket,
    /// Anything else (file, pipe end, eventfd...): forgets what the number meant before.
    Other,
}

/// The meaning of one system call number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysClass {
    /// The first argument is an fd the call operates on.
    pub fd_arg: bool,
    /// A non-negative return is a count of bytes read.
    pub reads: bool,
    /// A non-negative return is a count of bytes written.
    pub writes: bool,
    /// The call is `close`.
    pub close: bool,
    /// The call is a socket operation whatever its fd.
    pub sock: Option<SockOp>,
    /// A non-negative return is a new fd of this kind.
    pub new_fd: Option<NewFd>,
}

/// The name of system call `nr` (`syscall_N` for a number the table does not know).
pub fn name(nr: u32) -> std::borrow::Cow<'static, str> {
    match tracer_abi::syscalls::name(nr) {
        Some(n) => n.into(),
        None => format!("syscall_{nr}").into(),
    }
}

/// Classifies system call `nr`; unknown numbers get the empty class.
pub fn class(nr: u32) -> SysClass {
    let fd = SysClass {
        fd_arg: true,
        ..SysClass::default()
    };
    let new_fd = |k| SysClass {
        new_fd: Some(k),
        ..SysClass::default()
    };
    match nr {
        // read, pread64, readv, preadv, preadv2
        0 | 17 | 19 | 295 | 327 => SysClass { reads: true, ..fd },
        // write, pwrite64, writev, pwritev, pwritev2, sendfile (out_fd first)
        1 | 18 | 20 | 296 | 328 | 40 => SysClass { writes: true, ..fd },
        3 => SysClass { close: true, ..fd },
        41 => SysClass {
            sock: Some(SockOp::Socket),
            new_fd: Some(NewFd::Socket),
            ..SysClass::default()
        },
        42 => SysClass {
            sock: Some(SockOp::Connect),
            ..fd
        },
        // accept, accept4
        43 | 288 => SysClass {
            sock: Some(SockOp::Accept),
            new_fd: Some(NewFd::Accepted),
            ..fd
        },
        // sendto, sendmsg
        44 | 46 => SysClass {
            writes: true,
            sock: Some(SockOp::Send),
            ..fd
        },
        // recvfrom, recvmsg
        45 | 47 => SysClass {
            reads: true,
            sock: Some(SockOp::Recv),
            ..fd
        },
        // sendmmsg / recvmmsg return a count of messages, not bytes.
        307 => SysClass {
            sock: Some(SockOp::Send),
            ..fd
        },
        299 => SysClass {
            sock: Some(SockOp::Recv),
            ..fd
        },
        48 => SysClass {
            sock: Some(SockOp::Shutdown),
            ..fd
        },
        49 => SysClass {
            sock: Some(SockOp::Bind),
            ..fd
        },
        50 => SysClass {
            sock: Some(SockOp::Listen),
            ..fd
        },
        // fstat, lseek, ioctl, getsockname, getpeername, setsockopt, getsockopt, fcntl,
        // flock, fsync, fdatasync, ftruncate, getdents64, fadvise64, splice, fallocate,
        // copy_file_range
        5 | 8 | 16 | 51 | 52 | 54 | 55 | 72 | 73 | 74 | 75 | 77 | 217 | 221 | 275 | 285 | 326 => fd,
        // open, openat, creat, openat2, dup, dup2, dup3, epoll_create(1), eventfd(2),
        // timerfd_create, signalfd(4), memfd_create, inotify_init(1), pidfd_open
        2 | 257 | 85 | 437 | 32 | 33 | 292 | 213 | 291 | 284 | 290 | 283 | 282 | 289 | 319
        | 253 | 294 | 434 => new_fd(NewFd::Other),
        _ => SysClass::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_abi::syscalls::number;

    #[test]
    fn numbers_match_the_name_table() {
        let n = |s| number(s).unwrap();
        assert!(class(n("read")).reads && class(n("pread64")).reads);
        assert!(class(n("preadv2")).reads && class(n("readv")).reads);
        assert!(class(n("writev")).writes && class(n("sendfile")).writes);
        assert!(class(n("pwritev2")).writes && class(n("pwrite64")).writes);
        assert!(class(n("close")).close);
        assert_eq!(class(n("accept4")).new_fd, Some(NewFd::Accepted));
        assert_eq!(class(n("accept")).new_fd, Some(NewFd::Accepted));
        assert_eq!(class(n("socket")).new_fd, Some(NewFd::Socket));
        assert_eq!(class(n("sendto")).sock, Some(SockOp::Send));
        assert_eq!(class(n("recvfrom")).sock, Some(SockOp::Recv));
        assert_eq!(class(n("sendmmsg")).sock, Some(SockOp::Send));
        assert_eq!(class(n("recvmmsg")).sock, Some(SockOp::Recv));
        assert_eq!(class(n("connect")).sock, Some(SockOp::Connect));
        assert_eq!(class(n("shutdown")).sock, Some(SockOp::Shutdown));
        assert_eq!(class(n("listen")).sock, Some(SockOp::Listen));
        assert_eq!(class(n("bind")).sock, Some(SockOp::Bind));
        for name in [
            "open",
            "openat",
            "creat",
            "openat2",
            "dup",
            "dup2",
            "dup3",
            "epoll_create1",
            "eventfd2",
            "timerfd_create",
            "signalfd4",
            "memfd_create",
            "pidfd_open",
        ] {
            assert_eq!(class(n(name)).new_fd, Some(NewFd::Other), "{name}");
        }
        for name in [
            "fstat",
            "lseek",
            "fcntl",
            "getdents64",
            "splice",
            "copy_file_range",
        ] {
            assert!(class(n(name)).fd_arg, "{name}");
        }
    }
}
