//! A waker that notes it fired before it wakes its task, so a task that drives several
//! futures polls only those something woke.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Wake, Waker};

/// Wakes its task and marks the futures polled with it as due.
pub struct FlagWaker {
    shared: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    /// Set while the task polls: a wake then only marks the futures due, and the task
    /// looks at its flags again before it sleeps (see [`Pass`]).
    pass: Pass,
    /// The task's waker, kept from the first poll.
    task: OnceLock<Waker>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.pass.0.load(Ordering::SeqCst)
            && let Some(task) = self.task.get()
        {
            task.wake_by_ref();
        }
    }
}

impl Default for FlagWaker {
    /// Due at first, so the first poll registers the futures.
    fn default() -> FlagWaker {
        FlagWaker::within(Pass::default())
    }
}

impl FlagWaker {
    /// A flag whose wakes during `pass` do not wake the task again.
    pub fn within(pass: Pass) -> FlagWaker {
        let shared = Arc::new(Flag {
            woken: AtomicBool::new(true),
            pass,
            task: OnceLock::new(),
        });
        let waker = Waker::from(Arc::clone(&shared));
        FlagWaker { shared, waker }
    }

    /// Whether something woke the futures since they were last polled.
    pub fn is_due(&self) -> bool {
        self.shared.woken.load(Ordering::SeqCst)
    }

    /// The waker to poll the futures with, or `None` when nothing woke them since they
    /// were last polled. A task whose waker changed (not tokio's) polls them with its
    /// own every time.
    pub fn waker_for<'a>(&'a self, cx: &'a Context<'_>) -> Option<&'a Waker> {
        let task = self.shared.task.get_or_init(|| cx.waker().clone());
        if !task.will_wake(cx.waker()) {
            return Some(cx.waker());
        }
        self.shared
            .woken
            .swap(false, Ordering::SeqCst)
            .then_some(&self.waker)
    }

    /// Marks the futures due: the next poll polls them.
    pub fn rearm(&self) {
        self.shared.woken.store(true, Ordering::SeqCst);
    }
}

/// One poll of a task that drives several futures, each behind a [`FlagWaker`]: one
/// future waking another within it (an answer read for a request that waits) costs
/// no second poll of the task. Shared by the flags of one task.
#[derive(Clone, Default)]
pub struct Pass(Arc<AtomicBool>);

impl Pass {
    /// Runs `step` while it makes progress or one of `flags` is due, at most
    /// `MAX_STEPS` times (then the task is woken to go on, as hyper yields). `step`
    /// says whether it polled anything, or ends the poll with `Some`.
    pub fn run<R>(
        &self,
        cx: &Context<'_>,
        flags: &[&FlagWaker],
        mut step: impl FnMut() -> Result<bool, R>,
    ) -> Option<R> {
        self.0.store(true, Ordering::SeqCst);
        for _ in 0..MAX_STEPS {
            match step() {
                Err(done) => {
                    self.0.store(false, Ordering::SeqCst);
                    return Some(done);
                }
                Ok(true) => continue,
                Ok(false) => {}
            }
            self.0.store(false, Ordering::SeqCst);
            // A wake between the last step and now did not wake the task: look again.
            if !flags.iter().any(|f| f.is_due()) {
                return None;
            }
            self.0.store(true, Ordering::SeqCst);
        }
        self.0.store(false, Ordering::SeqCst);
        if flags.iter().any(|f| f.is_due()) {
            cx.waker().wake_by_ref();
        }
        None
    }
}

/// How many steps one poll takes before the task yields.
const MAX_STEPS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A task that counts its wakes.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Counted>, Waker) {
        let counted = Arc::new(Counted::default());
        let waker = Waker::from(Arc::clone(&counted));
        (counted, waker)
    }

    #[test]
    fn due_at_first_then_only_once_woken() {
        let (wakes, waker) = task();
        let cx = Context::from_waker(&waker);
        let flag = FlagWaker::default();
        let given = flag.waker_for(&cx).cloned();
        assert!(given.is_some(), "due at first");
        assert!(flag.waker_for(&cx).is_none(), "nothing woke it");
        given.iter().for_each(Waker::wake_by_ref);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the task is woken");
        assert!(flag.waker_for(&cx).is_some(), "woken");
        assert!(flag.waker_for(&cx).is_none());
        flag.rearm();
        assert!(flag.waker_for(&cx).is_some(), "rearmed");
    }

    #[test]
    fn a_task_polled_with_another_waker_polls_every_time() {
        let (_, first) = task();
        let (_, other) = task();
        let flag = FlagWaker::default();
        assert!(flag.waker_for(&Context::from_waker(&first)).is_some());
        assert!(flag.waker_for(&Context::from_waker(&other)).is_some());
        assert!(flag.waker_for(&Context::from_waker(&other)).is_some());
    }

    #[test]
    fn a_wake_within_a_pass_is_stepped_without_waking_the_task() {
        let (wakes, waker) = task();
        let cx = Context::from_waker(&waker);
        let pass = Pass::default();
        let (a, b) = (
            FlagWaker::within(pass.clone()),
            FlagWaker::within(pass.clone()),
        );
        // The first pass registers both; `a`'s step wakes `b`, which goes in the same poll.
        let mut b_waker = None;
        let mut steps = Vec::new();
        let ended: Option<()> = pass.run(&cx, &[&a, &b], || {
            let mut polled = false;
            if a.waker_for(&cx).is_some() {
                polled = true;
                steps.push('a');
                if let Some(b) = &b_waker {
                    Waker::wake_by_ref(b);
                }
            }
            if let Some(w) = b.waker_for(&cx) {
                polled = true;
                steps.push('b');
                b_waker = Some(w.clone());
            }
            Ok(polled)
        });
        assert_eq!(ended, None);
        assert_eq!(steps, ['a', 'b']);
        // `a` woken from outside: the task is woken once; in its poll `a` wakes `b`.
        a.rearm();
        steps.clear();
        pass.run(&cx, &[&a, &b], || {
            let mut polled = false;
            if a.waker_for(&cx).is_some() {
                polled = true;
                steps.push('a');
                b_waker.iter().for_each(Waker::wake_by_ref);
            }
            if b.waker_for(&cx).is_some() {
                polled = true;
                steps.push('b');
            }
            Ok::<_, ()>(polled)
        });
        assert_eq!(steps, ['a', 'b']);
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "no wake during the pass reached the task"
        );
        // Outside a pass, a wake reaches the task.
        b_waker.iter().for_each(Waker::wake_by_ref);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_the_task() {
        let (wakes, waker) = task();
        let cx = Context::from_waker(&waker);
        let pass = Pass::default();
        let flag = FlagWaker::within(pass.clone());
        let mut steps = 0;
        let ended: Option<()> = pass.run(&cx, &[&flag], || {
            if let Some(w) = flag.waker_for(&cx) {
                steps += 1;
                w.wake_by_ref();
                return Ok(true);
            }
            Ok(false)
        });
        assert_eq!(ended, None);
        assert_eq!(steps, MAX_STEPS);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the task goes on later");
    }
}
