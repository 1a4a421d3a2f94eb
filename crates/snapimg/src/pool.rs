//! A small ordered worker pool on `std::thread` and channels.
//!
//! Jobs are numbered as they are submitted and results come back in that
//! order, whatever order the workers finish in. Each worker owns its own
//! work function (so it can keep a compression context). With zero threads
//! the work runs on the submitting thread and nothing else is spawned. The
//! caller bounds what is in flight with [`Pool::in_flight`].

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Worker threads by default: one per available CPU.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What a worker does with a job.
pub(crate) type Work<J, R> = Box<dyn FnMut(J) -> R + Send>;

/// A worker panicked or went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerLost;

impl fmt::Display for WorkerLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a worker thread panicked or exited")
    }
}

/// Ordered worker pool; see the module docs.
pub(crate) struct Pool<J, R> {
    inline: Option<Work<J, R>>,
    jobs: Option<SyncSender<(u64, J)>>,
    results: Option<Receiver<(u64, Option<R>)>>,
    workers: Vec<JoinHandle<()>>,
    ready: BTreeMap<u64, Option<R>>,
    submitted: u64,
    taken: u64,
}

impl<J, R> fmt::Debug for Pool<J, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.workers.len())
            .field("in_flight", &(self.submitted - self.taken))
            .finish_non_exhaustive()
    }
}

impl<J: Send + 'static, R: Send + 'static> Pool<J, R> {
    /// A pool of `threads` workers, each running its own `make()`; 0 (or a
    /// failure to spawn any thread) runs the work on the caller.
    pub fn new(threads: usize, make: impl Fn() -> Work<J, R>) -> Self {
        let mut pool = Pool {
            inline: None,
            jobs: None,
            results: None,
            workers: Vec::new(),
            ready: BTreeMap::new(),
            submitted: 0,
            taken: 0,
        };
        if threads > 0 {
            let (job_tx, job_rx) = mpsc::sync_channel::<(u64, J)>(threads * 2);
            let job_rx = Arc::new(Mutex::new(job_rx));
            let (res_tx, res_rx) = mpsc::channel();
            for i in 0..threads {
                let mut work = make();
                let job_rx = Arc::clone(&job_rx);
                let res_tx = res_tx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("snapimg-{i}"))
                    .spawn(move || loop {
                        let next = match job_rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok((seq, job)) = next else { return };
                        let out = catch_unwind(AssertUnwindSafe(|| work(job))).ok();
                        if res_tx.send((seq, out)).is_err() {
                            return;
                        }
                    });
                match spawned {
                    Ok(handle) => pool.workers.push(handle),
                    Err(_) => break,
                }
            }
            if !pool.workers.is_empty() {
                pool.jobs = Some(job_tx);
                pool.results = Some(res_rx);
                return pool;
            }
        }
        pool.inline = Some(make());
        pool
    }

    /// Worker threads (0: inline).
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Jobs submitted whose results were not taken yet.
    pub fn in_flight(&self) -> u64 {
        self.submitted - self.taken
    }

    /// Hand a job to a worker (blocks only if every worker's queue is full).
    pub fn submit(&mut self, job: J) -> Result<(), WorkerLost> {
        let seq = self.submitted;
        if let Some(work) = &mut self.inline {
            let out = catch_unwind(AssertUnwindSafe(|| work(job))).ok();
            self.ready.insert(seq, out);
        } else {
            let tx = self.jobs.as_ref().ok_or(WorkerLost)?;
            tx.send((seq, job)).map_err(|_| WorkerLost)?;
        }
        self.submitted += 1;
        Ok(())
    }

    fn accept(&mut self, (seq, out): (u64, Option<R>)) {
        self.ready.insert(seq, out);
    }

    /// The next result if present; a panicked job's slot is `Some(None)`.
    fn pop_ready(&mut self) -> Option<Option<R>> {
        let out = self.ready.remove(&self.taken)?;
        self.taken += 1;
        Some(out)
    }

    /// The next result in submission order, waiting for it; `None` if
    /// nothing is in flight.
    pub fn take_next(&mut self) -> Result<Option<R>, WorkerLost> {
        if self.taken == self.submitted {
            return Ok(None);
        }
        loop {
            if let Some(out) = self.pop_ready() {
                return out.map(Some).ok_or(WorkerLost);
            }
            let rx = self.results.as_ref().ok_or(WorkerLost)?;
            let msg = rx.recv().map_err(|_| WorkerLost)?;
            self.accept(msg);
        }
    }

    /// The next result in submission order if it is already done.
    pub fn try_take_next(&mut self) -> Result<Option<R>, WorkerLost> {
        if let Some(rx) = &self.results {
            let mut got = Vec::new();
            loop {
                match rx.try_recv() {
                    Ok(msg) => got.push(msg),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Err(WorkerLost),
                }
            }
            for msg in got {
                self.accept(msg);
            }
        }
        match self.pop_ready() {
            None => Ok(None),
            Some(out) => out.map(Some).ok_or(WorkerLost),
        }
    }
}

impl<J, R> Drop for Pool<J, R> {
    fn drop(&mut self) {
        // Closing the job channel ends every worker after its current job.
        self.jobs = None;
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order() {
        for threads in [0, 1, 3] {
            let mut pool: Pool<u64, u64> = Pool::new(threads, || {
                Box::new(|x: u64| {
                    std::thread::sleep(std::time::Duration::from_micros((x * 37) % 200));
                    x * 2
                })
            });
            assert_eq!(pool.threads(), threads);
            let mut out = Vec::new();
            for x in 0..50 {
                pool.submit(x).unwrap();
                while pool.in_flight() >= 4 {
                    out.push(pool.take_next().unwrap().unwrap());
                }
                while let Some(r) = pool.try_take_next().unwrap() {
                    out.push(r);
                }
            }
            while let Some(r) = pool.take_next().unwrap() {
                out.push(r);
            }
            assert_eq!(out, (0..50).map(|x| x * 2).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_panicking_job_is_an_error_not_a_hang() {
        let mut pool: Pool<u32, u32> = Pool::new(2, || {
            Box::new(|x: u32| {
                assert!(x != 3, "boom");
                x
            })
        });
        for x in 0..6 {
            pool.submit(x).unwrap();
        }
        let results: Vec<_> = (0..6).map(|_| pool.take_next()).collect();
        assert_eq!(results[2], Ok(Some(2)));
        assert_eq!(results[3], Err(WorkerLost));
        assert_eq!(results[5], Ok(Some(5)));
    }
}
