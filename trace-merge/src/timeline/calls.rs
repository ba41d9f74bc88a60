//! Calls of probed functions: entries push a thread's stack, exits pop it; Go calls
//! push and pop their goroutine's, since a goroutine may resume on another thread. Calls
//! whose returns are probed at their instructions (Go's, and native ones in programs that
//! throw exceptions) are paired with their returns by frame, and a frame seen gone ends
//! its call as unwound. USDT probes are marks on the thread they fire in.

use super::*;

impl Timeline {
    #[inline]
    pub(super) fn func_entry(&mut self, m: &Merged, func: u32) {
        self.native_entry(m, func, 0, false);
    }

    /// An exit closes the innermost open call of the same function; calls above it were
    /// left without returning (longjmp, an exception, a lost exit) and end as unwound.
    #[inline]
    pub(super) fn func_exit(&mut self, m: &Merged, func: u32, ret: u64) {
        let r = self.acting(m);
        let th = &mut self.rt[r as usize];
        match th.stack.iter().rposition(|c| c.func == func) {
            None => self.stats.orphan_func_exits += 1,
            Some(i) => self.close_calls_from(r, m, i, Some(ret)),
        }
    }

    /// A call whose returns are probed at their instructions, its frame at `sp`: calls of
    /// such functions whose frames are at or below it are over (an exception left them,
    /// or a jump to a function not probed), unless its program switches stacks (`exact`),
    /// where they may be on another stack.
    pub(super) fn frame_entry(&mut self, m: &Merged, func: u32, sp: u64, exact: bool) {
        let r = self.acting(m);
        if !exact {
            self.unwind_frames(r, m, |at| at <= sp);
        }
        self.native_entry(m, func, sp, exact);
    }

    /// A call left the frame at `sp`: it is the innermost open one if that is its function's
    /// and has that frame, deeper frames being gone; or, in a program that switches
    /// stacks, the open call of its function at that exact frame, wherever it is.
    pub(super) fn frame_exit(&mut self, m: &Merged, func: u32, sp: u64, ret: Option<u64>) {
        let r = self.acting(m);
        self.unwind_frames(r, m, |at| at < sp);
        let th = &mut self.rt[r as usize];
        let at_frame = |c: &OpenCall| c.func == func && c.sp == sp;
        if th.stack.last().is_some_and(at_frame) {
            let top = th.stack.len() - 1;
            self.close_calls_from(r, m, top, ret);
        } else if let Some(i) = th.stack.iter().rposition(|c| c.exact && at_frame(c)) {
            let c = th.stack.remove(i);
            self.out.push(Item::Func(Span {
                thread: r,
                func: c.func,
                begin: c.begin,
                end: m.time,
                depth: i as u32,
                ret,
                end_kind: SpanEnd::Returned,
                cpu: Some(m.cpu),
                goroutine: None,
            }));
        } else {
            self.stats.orphan_func_exits += 1;
        }
    }

    #[inline]
    fn native_entry(&mut self, m: &Merged, func: u32, sp: u64, exact: bool) {
        let t = m.time;
        let r = self.acting(m);
        self.rt[r as usize].stack.push(OpenCall {
            func,
            begin: t,
            sp,
            exact,
        });
        self.out.push(Item::FuncEntry {
            thread: r,
            time: t,
            cpu: m.cpu,
            func,
            goroutine: None,
        });
    }

    /// Ends the open calls of thread `r` from the `i`th: the `i`th returned (with `ret`,
    /// when known), the ones above it were left without returning.
    fn close_calls_from(&mut self, r: ThreadRef, m: &Merged, i: usize, ret: Option<u64>) {
        let th = &mut self.rt[r as usize];
        while th.stack.len() > i {
            let c = th.stack.pop().unwrap_or_default();
            let depth = th.stack.len() as u32;
            let returned = th.stack.len() == i;
            self.out.push(Item::Func(Span {
                thread: r,
                func: c.func,
                begin: c.begin,
                end: m.time,
                depth,
                ret: if returned { ret } else { None },
                end_kind: if returned {
                    SpanEnd::Returned
                } else {
                    SpanEnd::Unwound
                },
                cpu: Some(m.cpu),
                goroutine: None,
            }));
        }
    }

    /// Ends as unwound, now, the innermost open calls of thread `r` paired by frame whose
    /// frame `gone` says is gone (not those of a program that switches stacks).
    fn unwind_frames(&mut self, r: ThreadRef, m: &Merged, gone: impl Fn(u64) -> bool) {
        let th = &mut self.rt[r as usize];
        while let Some(c) = th.stack.pop_if(|c| c.sp != 0 && !c.exact && gone(c.sp)) {
            self.out.push(Item::Func(Span {
                thread: r,
                func: c.func,
                begin: c.begin,
                end: m.time,
                depth: th.stack.len() as u32,
                ret: None,
                end_kind: SpanEnd::Unwound,
                cpu: Some(m.cpu),
                goroutine: None,
            }));
        }
    }

    /// A Go call: on its goroutine's stack, with the thread that entered it. Calls whose
    /// frames are at or below its own are over: a panic left them without a return.
    pub(super) fn go_entry(&mut self, m: &Merged, func: u32, g: u64, height: u32) {
        let t = m.time;
        let r = self.acting(m);
        if height != 0 {
            self.unwind_goroutine(m, g, |c| c.height >= height);
        }
        let stack = self.goroutines.entry((m.ident, g)).or_default();
        stack.push(GoCall {
            func,
            begin: t,
            thread: r,
            height,
        });
        self.out.push(Item::FuncEntry {
            thread: r,
            time: t,
            cpu: m.cpu,
            func,
            goroutine: Some(g),
        });
    }

    /// A Go return closes its call, shown on the thread that entered it: the open call of
    /// the function whose frame it returns from (the innermost one of the function when
    /// the file has no frame heights); calls above it were left by a panic and end as
    /// unwound.
    pub(super) fn go_exit(&mut self, m: &Merged, func: u32, ret: u64, g: u64, height: u32) {
        let t = m.time;
        self.acting(m);
        let Some(stack) = self.goroutines.get_mut(&(m.ident, g)) else {
            self.stats.orphan_func_exits += 1;
            return;
        };
        let found = match height {
            0 => stack.iter().rposition(|c| c.func == func),
            h => stack.iter().rposition(|c| c.func == func && c.height == h),
        };
        let Some(i) = found else {
            self.stats.orphan_func_exits += 1;
            if height != 0 {
                self.unwind_goroutine(m, g, |c| c.height > height);
            }
            return;
        };
        while let Some(c) = stack.pop() {
            let depth = stack.len() as u32;
            let returned = stack.len() == i;
            self.out.push(Item::Func(Span {
                thread: c.thread,
                func: c.func,
                begin: c.begin,
                end: t,
                depth,
                ret: returned.then_some(ret),
                end_kind: if returned {
                    SpanEnd::Returned
                } else {
                    SpanEnd::Unwound
                },
                cpu: Some(m.cpu),
                goroutine: Some(g),
            }));
            if returned {
                break;
            }
        }
        if stack.is_empty() {
            self.goroutines.remove(&(m.ident, g));
        }
    }

    /// Ends as unwound, now, the innermost open calls of goroutine `g` that `over` says
    /// are over (their frames known to be gone).
    fn unwind_goroutine(&mut self, m: &Merged, g: u64, over: impl Fn(&GoCall) -> bool) {
        let Some(stack) = self.goroutines.get_mut(&(m.ident, g)) else {
            return;
        };
        while let Some(c) = stack.pop_if(|c| c.height != 0 && over(c)) {
            self.out.push(Item::Func(Span {
                thread: c.thread,
                func: c.func,
                begin: c.begin,
                end: m.time,
                depth: stack.len() as u32,
                ret: None,
                end_kind: SpanEnd::Unwound,
                cpu: Some(m.cpu),
                goroutine: Some(g),
            }));
        }
        if stack.is_empty() {
            self.goroutines.remove(&(m.ident, g));
        }
    }

    /// A USDT probe fired.
    pub(super) fn usdt(&mut self, m: &Merged, probe: u32, nargs: u8, args: [u64; 6]) {
        let r = self.acting(m);
        self.out.push(Item::Mark(Mark {
            thread: r,
            time: m.time,
            cpu: m.cpu,
            probe,
            nargs,
            args,
        }));
    }

    /// Ends every open Go call at the trace's end.
    pub(super) fn close_goroutines(&mut self, t: u64) {
        let mut open: Vec<((u32, u64), Vec<GoCall>)> = self.goroutines.drain().collect();
        // In a stable order: the map's is not.
        open.sort_unstable_by_key(|(k, _)| *k);
        for ((_, g), mut stack) in open {
            while let Some(c) = stack.pop() {
                self.out.push(Item::Func(Span {
                    thread: c.thread,
                    func: c.func,
                    begin: c.begin,
                    end: t,
                    depth: stack.len() as u32,
                    ret: None,
                    end_kind: SpanEnd::TraceEnded,
                    cpu: None,
                    goroutine: Some(g),
                }));
            }
        }
    }

    pub(super) fn close_stack(
        &mut self,
        r: ThreadRef,
        mut stack: Vec<OpenCall>,
        t: u64,
        cpu: Option<u32>,
        kind: SpanEnd,
    ) {
        while let Some(c) = stack.pop() {
            self.out.push(Item::Func(Span {
                thread: r,
                func: c.func,
                begin: c.begin,
                end: t,
                depth: stack.len() as u32,
                ret: None,
                end_kind: kind,
                cpu,
                goroutine: None,
            }));
        }
        // Give the allocation back, so a thread's stack is allocated once.
        self.rt[r as usize].stack = stack;
    }

    /// Ends the system call and every call open on thread `r` at `t`.
    pub(super) fn close_all(&mut self, r: ThreadRef, t: u64, cpu: Option<u32>, kind: SpanEnd) {
        if let Some(o) = self.rt[r as usize].sys.take() {
            self.close_sys(r, o, t, cpu, kind);
        }
        let stack = std::mem::take(&mut self.rt[r as usize].stack);
        self.close_stack(r, stack, t, cpu, kind);
    }
}
