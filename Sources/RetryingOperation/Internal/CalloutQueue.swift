/// The bookkeeping that runs the jobs of one operation one at a time, in order, on
/// whichever thread submits a job while no other job is running.
///
/// Every piece of user code a ``RetryingOperation`` calls (`startBaseOperation`,
/// `cancelBaseOperation`, retry helpers' `setup`/`teardown`) and every KVO announcement
/// it posts runs in one of its jobs (``RetryingOperation/Callout``). That serialises them
/// without a thread hop: the common path (start an attempt, end it, finish) runs inline,
/// and a job submitted while another runs — a timer firing during `startBaseOperation`,
/// for instance — is run right after it by the thread that is already draining.
///
/// A value kept inside the operation's locked state, so that submitting a job and the state
/// change that calls for it (an attempt's end, say) take one lock round trip; jobs are
/// values, so queuing one allocates nothing in the common case. The caller holds the lock
/// around every method, and runs jobs outside it.
struct CalloutQueue<Job> {
    /// Whether a thread is running jobs; it runs every job submitted until the queue is
    /// empty.
    private var isDraining = false
    // The pending jobs, oldest first: `nextJob`, then `laterJobs`. One pending job — the
    // common case, an attempt that ends inside `startBaseOperation` — needs no array.
    private var nextJob: Job?
    private var laterJobs: [Job] = []

    init() {}

    /// Submits `job`. Returns `true` when the queue was idle: the caller must then run
    /// `job` itself, outside the lock, and go on with ``takeNextJobOrStopDraining()``.
    /// Otherwise `job` waits behind the running job, and the draining thread will run it.
    mutating func submit(_ job: Job) -> Bool {
        guard isDraining else {
            isDraining = true
            return true
        }
        if nextJob == nil && laterJobs.isEmpty {
            nextJob = job
        } else {
            laterJobs.append(job)
        }
        return false
    }

    /// The oldest pending job; when there is none, the queue stops draining and the caller
    /// must stop running jobs.
    mutating func takeNextJobOrStopDraining() -> Job? {
        if let job = nextJob {
            nextJob = nil
            return job
        }
        if !laterJobs.isEmpty {
            return laterJobs.removeFirst()
        }
        isDraining = false
        return nil
    }
}

extension CalloutQueue: Sendable where Job: Sendable {}
