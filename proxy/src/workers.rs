//! Connection workers: a few threads, each running its own single-threaded
//! Tokio runtime. Every accepted connection is handed to one worker and stays
//! there: its TLS, its HTTP, the upstream connection it uses and every task
//! they spawn run on that one thread. Its events wait until it is about to
//! sleep (see `outlet`).
//!
//! Why: on a shared multi-threaded runtime one request used to hop between
//! threads (client connection on one, pooled upstream connection on another),
//! and each hop was a futex wake-up and a context switch. Profiles of
//! keep-alive load showed the scheduler, not Airlock's code, as the largest
//! cost; see BENCHMARKS.md. Connections are spread round-robin, as nginx
//! spreads them over its worker processes.

use std::cell::Cell;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::outlet;

thread_local! {
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How long stopping waits for a worker's tasks to end.
const STOP_WITHIN: Duration = Duration::from_millis(500);

/// The worker threads of one proxy.
pub(crate) struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Dropping a sender stops its worker (its tasks are dropped, its
    /// connections closed).
    stops: Mutex<Vec<oneshot::Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Workers {
    /// Start `count` workers (at least one).
    pub(crate) fn start(count: usize) -> std::io::Result<Self> {
        let count = count.max(1);
        let mut handles = Vec::with_capacity(count);
        let mut stops = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(outlet::flush_this_thread)
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("airlock-conn-{index}"))
                    .spawn(move || {
                        CURRENT.set(Some(index));
                        outlet::queue_on_this_thread();
                        // Ends on a send or when the sender is dropped.
                        let _ = runtime.block_on(stopped);
                        runtime.shutdown_timeout(STOP_WITHIN);
                        // Events of the tasks that just ended.
                        outlet::flush_this_thread();
                    })?,
            );
        }
        Ok(Self {
            handles,
            next: AtomicUsize::new(0),
            stops: Mutex::new(stops),
            threads: Mutex::new(threads),
        })
    }

    pub(crate) fn count(&self) -> usize {
        self.handles.len()
    }

    /// Run `task` on the next worker in turn.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        drop(self.handles[index].spawn(task));
    }

    /// Stop every worker, dropping its connections, and wait for the threads
    /// to end (from a worker itself it only signals: a thread cannot join
    /// itself).
    pub(crate) fn stop(&self) {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if current().is_some() {
            return;
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// The index of the worker this thread is, if it is one.
pub(crate) fn current() -> Option<usize> {
    CURRENT.get()
}

/// How many workers to start by default: one per CPU this process may use.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_the_workers_in_turn_and_stop_ends_them() {
        let workers = Workers::start(2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..4 {
            let tx = tx.clone();
            workers.spawn(async move {
                tx.send(current()).unwrap();
            });
        }
        let mut seen: Vec<_> = (0..4).map(|_| rx.recv().unwrap()).collect();
        seen.sort();
        assert_eq!(seen, [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(current(), None, "the test thread is not a worker");

        // A task that would run forever is dropped by stop.
        let (alive, dropped) = oneshot::channel::<()>();
        workers.spawn(async move {
            let _alive = alive;
            std::future::pending::<()>().await;
        });
        workers.stop();
        assert!(dropped.blocking_recv().is_err(), "the task was dropped");
    }
}
