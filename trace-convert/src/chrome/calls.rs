//! A thread's calls, kept nested on its track: functions, system calls, USDT marks, Go calls.

use trace_merge::sysclass;
use trace_merge::timeline::{Mark, Span, SpanEnd, SyscallSpan};

use super::json::{first, k, Json, Str};
use super::*;

/// The keys of a USDT mark's arguments.
const USDT_ARGS: [&str; tracer_abi::MAX_USDT_ARGS] = [
    ",\"arg0\":",
    ",\"arg1\":",
    ",\"arg2\":",
    ",\"arg3\":",
    ",\"arg4\":",
    ",\"arg5\":",
];

impl<W: Write> Writer<W> {
    /// A system call's `X` slice, cut to nest inside its thread's calls and to the window.
    pub(super) fn syscall(&mut self, tl: &Timeline, s: &SyscallSpan) -> std::io::Result<()> {
        let (begin, end, clipped) = self.track(s.thread).sys_slice(s);
        let Some((begin, end)) = self.clip(begin, end) else {
            return Ok(());
        };
        let how = match s.end > self.window.1 {
            true => "window ended",
            false => end_name(s.end_kind),
        };
        let out = self.syscall_head(tl, s.thread, s.nr, (begin, end), how)?;
        if !s.entered {
            out.write_all(br#","entry":"before the recording""#)?;
        }
        if clipped {
            // Drawn only as far as it can be without crossing a function's edge.
            Json(out)
                .q(k!("clipped"), "records lost")
                .t(k!("recorded_dur"), s.end - s.begin);
        }
        if let Some(fd) = s.fd {
            Json(out).i(k!("fd"), fd as i64);
        }
        if let Some(ret) = s.ret {
            Json(out).i(k!("return"), ret);
        }
        if s.bytes_read > 0 {
            Json(out).n(k!("bytes_read"), s.bytes_read);
        }
        if s.bytes_written > 0 {
            Json(out).n(k!("bytes_written"), s.bytes_written);
        }
        if let Some(c) = s.conn.or(s.new_conn) {
            Json(out).n(k!("connection"), c as u64);
        }
        out.extend_from_slice(b"}}");
        Ok(())
    }

    /// Starts the `X` slice of system call `nr` of thread `r` over `[begin, end]`, up to
    /// its first argument, `end` (how it ended); the caller adds arguments and closes it.
    pub(super) fn syscall_head(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        nr: u32,
        (begin, end): (u64, u64),
        how: &str,
    ) -> std::io::Result<&mut Vec<u8>> {
        let (_, p, t) = Self::ids(tl, r);
        self.syscalls += 1;
        let out = self.out.next()?;
        Json(out)
            .head("X", "syscall", p, t, begin)
            .t(k!("dur"), end - begin)
            .q(k!("name"), &sysclass::name(nr))
            .raw(k!("args"))
            .q(first!("end"), how);
        Ok(out)
    }

    pub(super) fn begin_call(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        func: u32,
        t: u64,
    ) -> std::io::Result<()> {
        let (_, p, tid) = Self::ids(tl, r);
        let name = func_name(&mut self.funcs, tl, tl.thread(r).source, func);
        Json(self.out.next()?)
            .head("B", "function", p, tid, t)
            .raw(k!("name"))
            .raw(name)
            .raw("}");
        Ok(())
    }

    /// A Go call, as a complete slice on its goroutine's track.
    pub(super) fn goroutine_call(&mut self, tl: &Timeline, s: &Span) -> std::io::Result<()> {
        let Some((begin, end)) = self.clip(s.begin, s.end) else {
            return Ok(());
        };
        let m = tl.thread(s.thread);
        let host = tl.merger().sources()[m.source as usize].node;
        let key = (host, m.tgid, s.goroutine.unwrap_or(0));
        let next = self.goroutines.len() as u64;
        let track = goroutine_tid(host, *self.goroutines.entry(key).or_insert(next));
        let name = func_name(&mut self.funcs, tl, m.source, s.func);
        let how = match s.end > self.window.1 {
            true => "window ended",
            false => end_name(s.end_kind),
        };
        let out = self.out.next()?;
        Json(out)
            .head("X", "function", pid(host, m.tgid), track, begin)
            .t(k!("dur"), end - begin)
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .q(first!("end"), how)
            .n(k!("thread"), m.tid as u64);
        if let Some(ret) = s.ret {
            Json(out).i(k!("return"), ret as i64);
        }
        out.extend_from_slice(b"}}");
        self.functions += 1;
        Ok(())
    }

    /// A USDT probe: an instant on its thread's track, with its arguments.
    pub(super) fn mark(&mut self, tl: &Timeline, mk: &Mark) -> std::io::Result<()> {
        if !(self.window.0..self.window.1).contains(&mk.time) {
            return Ok(());
        }
        let (_, p, t) = Self::ids(tl, mk.thread);
        let name = func_name(&mut self.funcs, tl, tl.thread(mk.thread).source, mk.probe);
        let out = self.out.next()?;
        Json(out)
            .head("i", "usdt", p, t, mk.time)
            .q(k!("s"), "t")
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .n(first!("probe"), mk.probe as u64);
        for (i, &a) in mk.args.iter().take(mk.nargs as usize).enumerate() {
            Json(out).i(USDT_ARGS[i], a as i64);
        }
        out.extend_from_slice(b"}}");
        Ok(())
    }

    /// `end`: (time, how the call ended).
    pub(super) fn end_call(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        func: u32,
        end: (u64, &str),
        ret: Option<u64>,
    ) -> std::io::Result<()> {
        let (_, p, t) = Self::ids(tl, r);
        let name = func_name(&mut self.funcs, tl, tl.thread(r).source, func);
        let out = self.out.next()?;
        Json(out)
            .head("E", "function", p, t, end.0)
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .q(first!("end"), end.1);
        if let Some(ret) = ret {
            Json(out).i(k!("return"), ret as i64);
        }
        out.extend_from_slice(b"}}");
        self.functions += 1;
        Ok(())
    }
}

/// A system call is a leaf inside the function calls of its thread. Records lost (a
/// system call's exit, a function's entry) can make them cross; the slice of the system
/// call is then cut at the function's edge, as viewers require slices to nest.
#[derive(Clone, Default)]
pub(super) struct ThreadTrack {
    /// Entry time and number of the system call under way.
    pub(super) sys_open: Option<(u64, u32)>,
    /// Calls under way: (probe id, its `B` is written).
    pub(super) calls: Vec<(u32, bool)>,
    /// The first function edge since that entry.
    sys_clip: Option<u64>,
    /// The latest function edge.
    last_func: u64,
}

impl ThreadTrack {
    pub(super) fn func_event(&mut self, t: u64) {
        if self.sys_open.is_some() && self.sys_clip.is_none() {
            self.sys_clip = Some(t);
        }
        self.last_func = t;
    }

    /// (begin, end, clipped) of a system call's slice.
    pub(super) fn sys_slice(&mut self, s: &SyscallSpan) -> (u64, u64, bool) {
        let clip = self.sys_clip.take();
        let open = self.sys_open.take();
        let (mut begin, mut end) = (s.begin, s.end);
        if s.entered && open.map(|o| o.0) == Some(s.begin) {
            end = clip.map_or(end, |c| c.min(end));
        } else {
            // Under way when its thread was first seen: it began after any function edge.
            begin = begin.max(self.last_func).min(end);
        }
        (begin, end, (begin, end) != (s.begin, s.end))
    }
}

/// A function's name as a JSON string, looked up and escaped once.
pub(super) fn func_name<'a>(
    cache: &'a mut HashMap<(u32, u32), String>,
    tl: &Timeline,
    source: u32,
    func: u32,
) -> &'a str {
    cache.entry((source, func)).or_insert_with(|| {
        let name = match tl.merger().sources()[source as usize].probe(func) {
            Some(p) => p.name.clone(),
            None => format!("function_{func}"),
        };
        Str(&name).to_string()
    })
}

pub(super) fn end_name(e: SpanEnd) -> &'static str {
    match e {
        SpanEnd::Returned => "returned",
        SpanEnd::Unwound => "unwound",
        SpanEnd::Exited => "thread exited",
        SpanEnd::TraceEnded => "trace ended",
    }
}
