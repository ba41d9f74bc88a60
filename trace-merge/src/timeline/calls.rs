//! Calls of probed functions: entries push a thread's stack, exits pop it.

use super::*;

impl Timeline {
    #[inline]
    pub(super) fn func_entry(&mut self, m: &Merged, func: u32) {
        let t = m.time;
        let r = self.acting(m);
        self.rt[r as usize].stack.push((func, t));
        self.out.push(Item::FuncEntry {
            thread: r,
            time: t,
            cpu: m.cpu,
            func,
        });
    }

    /// An exit closes the innermost open call of the same function; calls above it were
    /// left without returning (longjmp, an exception, a lost exit) and end as unwound.
    #[inline]
    pub(super) fn func_exit(&mut self, m: &Merged, func: u32, ret: u64) {
        let t = m.time;
        let r = self.acting(m);
        let th = &mut self.rt[r as usize];
        match th.stack.iter().rposition(|f| f.0 == func) {
            None => self.stats.orphan_func_exits += 1,
            Some(i) => {
                while th.stack.len() > i + 1 {
                    let (f, b) = th.stack.pop().unwrap_or_default();
                    let depth = th.stack.len() as u32;
                    self.out.push(Item::Func(Span {
                        thread: r,
                        func: f,
                        begin: b,
                        end: t,
                        depth,
                        ret: None,
                        end_kind: SpanEnd::Unwound,
                        cpu: Some(m.cpu),
                    }));
                }
                let (f, b) = th.stack.pop().unwrap_or_default();
                self.out.push(Item::Func(Span {
                    thread: r,
                    func: f,
                    begin: b,
                    end: t,
                    depth: i as u32,
                    ret: Some(ret),
                    end_kind: SpanEnd::Returned,
                    cpu: Some(m.cpu),
                }));
            }
        }
    }

    pub(super) fn close_stack(
        &mut self,
        r: ThreadRef,
        mut stack: Vec<(u32, u64)>,
        t: u64,
        cpu: Option<u32>,
        kind: SpanEnd,
    ) {
        while let Some((func, begin)) = stack.pop() {
            self.out.push(Item::Func(Span {
                thread: r,
                func,
                begin,
                end: t,
                depth: stack.len() as u32,
                ret: None,
                end_kind: kind,
                cpu,
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
